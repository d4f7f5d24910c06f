"""The shelve family: ``shelve`` and ``shelve_offload`` are one step on the instance's
host; ``unshelve`` goes first to the scheduler (``scheduler.select_for_unshelve``:
Nova's conductor), which replaces itself with the host step (``start_instance`` on the
same host for a SHELVED instance, ``unshelve_instance`` on a newly claimed host for a
SHELVED_OFFLOADED one). Every step carries the errback that undoes it."""

from __future__ import annotations

from celery.canvas import Signature


def shelve_step(action: str, instance_uuid: str, request_id: str, host: str) -> Signature:
    """``action``: "shelve" or "shelve_offload"."""
    from tasks import shelve as shelve_tasks

    task = {"shelve": shelve_tasks.shelve_instance, "shelve_offload": shelve_tasks.offload}[action]
    step = task.si(instance_uuid=instance_uuid, request_id=request_id, host=host)
    step.on_error(shelve_tasks.on_shelve_error.s())
    return step


def unshelve_workflow(instance_uuid: str, request_id: str) -> Signature:
    from tasks import shelve as shelve_tasks

    step = shelve_tasks.select_for_unshelve.si(instance_uuid=instance_uuid, request_id=request_id)
    step.on_error(shelve_tasks.on_shelve_error.s())
    return step


def unshelve_step(instance_uuid: str, request_id: str, host: str) -> Signature:
    from tasks import shelve as shelve_tasks

    step = shelve_tasks.unshelve_instance.si(
        instance_uuid=instance_uuid, request_id=request_id, host=host
    )
    step.on_error(shelve_tasks.on_shelve_error.s())
    return step
