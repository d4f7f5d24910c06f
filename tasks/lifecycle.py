"""Compute-queue tasks for the life of a server, one per row of the operation table
(``compute.operations``): each builds the step context, sends the row's notification
around ``compute.steps.run_step`` and returns the outcome.

Each is routed to ``compute.<host>`` by its ``host`` keyword; ``on_lifecycle_error`` is the
errback the API links to every one of them (it runs in the worker where the step failed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.utils.log import get_task_logger

from compute import operations
from compute.operations import LIFECYCLE_ERRBACK, Operation
from compute.steps import notified_step, run_step
from novaq.celery_app import app
from novaq.settings import Settings
from tasks import context
from tasks.compute import check_host
from tasks.errbacks import abort_operation

LOG = get_task_logger(__name__)

#: Options a step takes from this worker's settings rather than from its message.
Options = Callable[[Settings], dict[str, Any]]


def run_operation(
    op: Operation, instance_uuid: str, request_id: str, host: str, **params: Any
) -> dict[str, str]:
    """Run ``op``'s host step here: ``{"instance_uuid", "outcome"}``."""
    check_host(host)
    assert op.step is not None and op.notification is not None
    ctx = context.step_context(request_id, host)
    with notified_step(ctx, op.notification, instance_uuid):
        outcome = run_step(ctx, op.step, instance_uuid, **params)
    return {"instance_uuid": instance_uuid, "outcome": outcome}


def host_task(action: str, options: Options | None = None) -> Any:
    """The Celery task of the table's ``action`` (named as its row says). Its keyword
    arguments besides the ids are the step's parameters (``clean_shutdown``, ``hard``,
    ``rescue_image_ref``); ``compute.reboot_instance`` with ``hard`` runs the hard
    reboot's row."""
    name = operations.operation(action).task
    assert name is not None

    @app.task(name=name)
    def task(instance_uuid: str, request_id: str, host: str, **params: Any) -> dict[str, str]:
        op = operations.of_task(name, params)
        assert op is not None
        extra = options(context.settings()) if options is not None else {}
        return run_operation(op, instance_uuid, request_id, host, **params, **extra)

    return task


def _lifecycle_tasks() -> dict[str, Any]:
    """One task per lifecycle row of the table, by task name."""
    tasks: dict[str, Any] = {}
    for op in operations.lifecycle_operations():
        if op.task is not None and op.task not in tasks:
            tasks[op.task] = host_task(op.action)
    return tasks


TASKS = _lifecycle_tasks()


@app.task(name=LIFECYCLE_ERRBACK, count_deliveries=False)
def on_lifecycle_error(request: Any, exc: BaseException, traceback: Any) -> None:
    """Undo a lifecycle step that failed before its own handling ran (delivery limit,
    wrong host); a no-op when the step already compensated."""
    abort_operation(LIFECYCLE_ERRBACK, request, exc)
