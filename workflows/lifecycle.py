"""Power and lifecycle operations: one step on the instance's host, with the errback that
undoes a step which failed before its own handling ran."""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature

from workflows.canvas import errback, step

#: API action name -> task name (without the ``compute.`` prefix).
TASKS = {
    "stop": "stop_instance",
    "start": "start_instance",
    "reboot": "reboot_instance",
    "pause": "pause_instance",
    "unpause": "unpause_instance",
    "suspend": "suspend_instance",
    "resume": "resume_instance",
    "rescue": "rescue_instance",
    "unrescue": "unrescue_instance",
}


def lifecycle_step(
    action: str, instance_uuid: str, request_id: str, host: str, **extra: Any
) -> Signature:
    signature = step(
        f"compute.{TASKS[action]}",
        instance_uuid=instance_uuid,
        request_id=request_id,
        host=host,
        **extra,
    )
    signature.on_error(errback("scheduler.on_lifecycle_error"))
    return signature
