"""Rebuild and evacuate as Celery canvases, every step routed by its own ``host``.

- rebuild: one step on the server's host, ``compute.rebuild_instance``, after
  ``scheduler.check_rebuild`` (the image filters on that host) when the image changes;
- evacuate: ``scheduler.select_for_evacuation`` (selects and claims the destination),
  which replaces itself with ``compute.rebuild_instance`` on the destination, with the
  migration.

The error callback (``scheduler.on_rebuild_error``) is on every step; it and the reaper
of operations in flight run the same idempotent undo."""

from __future__ import annotations

from celery.canvas import Signature

from workflows.canvas import errback, step

ON_ERROR = "scheduler.on_rebuild_error"


def rebuild_workflow(instance_uuid: str, request_id: str, host: str) -> Signature:
    workflow = step(
        "compute.rebuild_instance", instance_uuid=instance_uuid, request_id=request_id, host=host
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow


def check_rebuild_workflow(instance_uuid: str, request_id: str, orig_image_ref: str) -> Signature:
    """A rebuild with a new image: the scheduler checks the server's host first."""
    workflow = step(
        "scheduler.check_rebuild",
        instance_uuid=instance_uuid,
        request_id=request_id,
        orig_image_ref=orig_image_ref,
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow


def select_evacuation_workflow(
    migration_uuid: str, instance_uuid: str, request_id: str
) -> Signature:
    workflow = step(
        "scheduler.select_for_evacuation",
        migration_uuid=migration_uuid,
        instance_uuid=instance_uuid,
        request_id=request_id,
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow


def evacuate_step(migration_uuid: str, instance_uuid: str, request_id: str, dest: str) -> Signature:
    workflow = step(
        "compute.rebuild_instance",
        instance_uuid=instance_uuid,
        request_id=request_id,
        host=dest,
        migration_uuid=migration_uuid,
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow
