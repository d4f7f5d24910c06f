"""Moves as Celery canvases: select + claim on ``scheduler``, which replaces itself with
prep_resize (destination) → resize_instance (source) → finish_resize (destination); confirm
is one step on the source; revert is revert_resize (destination) → finish_revert_resize
(source). Every step is routed by its own ``host``; the error callback is on every step."""

from __future__ import annotations

from typing import Any

from celery import chain
from celery.canvas import Signature

from workflows.canvas import errback, step

ON_ERROR = "scheduler.on_move_error"


def _ids(migration_uuid: str, instance_uuid: str, request_id: str) -> dict[str, Any]:
    return {
        "migration_uuid": migration_uuid,
        "instance_uuid": instance_uuid,
        "request_id": request_id,
    }


def select_workflow(migration_uuid: str, instance_uuid: str, request_id: str) -> Signature:
    workflow = step("scheduler.select_for_move", **_ids(migration_uuid, instance_uuid, request_id))
    workflow.on_error(errback(ON_ERROR))
    return workflow


def move_chain(
    migration_uuid: str,
    instance_uuid: str,
    request_id: str,
    source: str,
    dest: str,
    alternates: list[list[Any]],
) -> Signature:
    ids = _ids(migration_uuid, instance_uuid, request_id)
    workflow = chain(
        step("compute.prep_resize", **ids, host=dest, alternates=alternates),
        step("compute.resize_instance", **ids, host=source),
        step("compute.finish_resize", **ids, host=dest),
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow


def confirm_workflow(
    migration_uuid: str, instance_uuid: str, request_id: str, source: str
) -> Signature:
    workflow = step(
        "compute.confirm_resize", **_ids(migration_uuid, instance_uuid, request_id), host=source
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow


def revert_workflow(
    migration_uuid: str, instance_uuid: str, request_id: str, source: str, dest: str
) -> Signature:
    ids = _ids(migration_uuid, instance_uuid, request_id)
    workflow = chain(
        step("compute.revert_resize", **ids, host=dest),
        step("compute.finish_revert_resize", **ids, host=source),
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow
