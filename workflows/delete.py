"""Delete: one step, ``terminate_instance`` on the instance's host; soft delete and
restore: one step each on the instance's host, with the errback that undoes them."""

from __future__ import annotations

from celery.canvas import Signature

from workflows.canvas import errback, step

#: soft delete family action -> task name.
SOFT_DELETE_TASKS = {
    "soft_delete": "compute.soft_delete_instance",
    "restore": "compute.restore_instance",
}


def delete_workflow(instance_uuid: str, request_id: str, host: str) -> Signature:
    return step(
        "compute.terminate_instance", instance_uuid=instance_uuid, request_id=request_id, host=host
    )


def soft_delete_step(action: str, instance_uuid: str, request_id: str, host: str) -> Signature:
    """``action``: "soft_delete" or "restore"."""
    signature = step(
        SOFT_DELETE_TASKS[action], instance_uuid=instance_uuid, request_id=request_id, host=host
    )
    signature.on_error(errback("scheduler.on_soft_delete_error"))
    return signature
