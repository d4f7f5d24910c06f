"""Power and lifecycle operations: one step on the instance's host, with the errback that
undoes a step which failed before its own handling ran."""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature

from compute.operations import lifecycle_operations, operation
from workflows.canvas import errback, step

#: The power and lifecycle actions (the table's lifecycle rows) -> their task name
#: (without the ``compute.`` prefix).
TASKS = {op.action: str(op.task).removeprefix("compute.") for op in lifecycle_operations()}


def lifecycle_step(
    action: str, instance_uuid: str, request_id: str, host: str, **extra: Any
) -> Signature:
    """The host step of ``action`` (a row of ``compute.operations``) with its errback."""
    op = operation(action)
    assert op.task is not None and op.errback is not None
    signature = step(
        op.task, instance_uuid=instance_uuid, request_id=request_id, host=host, **extra
    )
    signature.on_error(errback(op.errback))
    return signature
