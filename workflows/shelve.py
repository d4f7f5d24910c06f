"""The shelve family: ``shelve`` and ``shelve_offload`` are one step on the instance's
host; ``unshelve`` goes first to the scheduler (``scheduler.select_for_unshelve``:
Nova's conductor), which replaces itself with the host step (``start_instance`` on the
same host for a SHELVED instance, ``unshelve_instance`` on a newly claimed host for a
SHELVED_OFFLOADED one). Every step carries the errback that undoes it."""

from __future__ import annotations

from celery.canvas import Signature

from workflows.canvas import errback, step

ON_ERROR = "scheduler.on_shelve_error"

#: shelve action -> task name.
SHELVE_TASKS = {
    "shelve": "compute.shelve_instance",
    "shelve_offload": "compute.shelve_offload_instance",
}


def shelve_step(action: str, instance_uuid: str, request_id: str, host: str) -> Signature:
    """``action``: "shelve" or "shelve_offload"."""
    signature = step(
        SHELVE_TASKS[action], instance_uuid=instance_uuid, request_id=request_id, host=host
    )
    signature.on_error(errback(ON_ERROR))
    return signature


def unshelve_workflow(instance_uuid: str, request_id: str) -> Signature:
    signature = step(
        "scheduler.select_for_unshelve", instance_uuid=instance_uuid, request_id=request_id
    )
    signature.on_error(errback(ON_ERROR))
    return signature


def unshelve_step(instance_uuid: str, request_id: str, host: str) -> Signature:
    signature = step(
        "compute.unshelve_instance", instance_uuid=instance_uuid, request_id=request_id, host=host
    )
    signature.on_error(errback(ON_ERROR))
    return signature
