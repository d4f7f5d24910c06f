"""Delete: one step, ``terminate_instance`` on the instance's host; soft delete and
restore: one step each on the instance's host, with the errback that undoes them."""

from __future__ import annotations

from celery.canvas import Signature


def delete_workflow(instance_uuid: str, request_id: str, host: str) -> Signature:
    from tasks.compute import terminate_instance

    return terminate_instance.si(instance_uuid=instance_uuid, request_id=request_id, host=host)


def soft_delete_step(action: str, instance_uuid: str, request_id: str, host: str) -> Signature:
    """``action``: "soft_delete" or "restore"."""
    from tasks import soft_delete as soft_delete_tasks

    task = {
        "soft_delete": soft_delete_tasks.soft_delete_instance,
        "restore": soft_delete_tasks.restore_instance,
    }[action]
    step = task.si(instance_uuid=instance_uuid, request_id=request_id, host=host)
    step.on_error(soft_delete_tasks.on_soft_delete_error.s())
    return step
