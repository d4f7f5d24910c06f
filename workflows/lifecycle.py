"""Power and lifecycle operations: one step on the instance's host, with the errback that
undoes a step which failed before its own handling ran."""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature

from compute.operations import operation

#: API action name -> task name (without the ``compute.`` prefix), from the table.
TASKS = {
    action: str(operation(action).task).removeprefix("compute.")
    for action in (
        "stop",
        "start",
        "reboot",
        "pause",
        "unpause",
        "suspend",
        "resume",
        "rescue",
        "unrescue",
    )
}


def lifecycle_step(
    action: str, instance_uuid: str, request_id: str, host: str, **extra: Any
) -> Signature:
    from tasks import lifecycle as lifecycle_tasks

    task = getattr(lifecycle_tasks, TASKS[action])
    step = task.si(instance_uuid=instance_uuid, request_id=request_id, host=host, **extra)
    step.on_error(lifecycle_tasks.on_lifecycle_error.s())
    return step
