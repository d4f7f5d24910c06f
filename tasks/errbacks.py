"""Error callbacks linked to workflows: the fast path of compensation.

New-style errbacks (``request, exc, traceback``) run in the worker process where the step
failed. They are not the only undo: expired or revoked steps never call them, so the same
idempotent undo also runs from worker start-up recovery and periodic reapers.
"""

from __future__ import annotations

from typing import Any

from celery.utils.log import get_task_logger

from compute import operations, steps
from compute.build import fail_build
from novaq.celery_app import app
from tasks import context

LOG = get_task_logger(__name__)


@app.task(name="scheduler.on_build_error", count_deliveries=False)
def on_build_error(request: Any, exc: BaseException, traceback: Any) -> None:
    kwargs = request.kwargs or {}
    uuids = kwargs.get("instance_uuids") or [kwargs.get("instance_uuid")]
    for instance_uuid in filter(None, uuids):
        LOG.warning("Build of %s failed in %s: %r", instance_uuid, request.task, exc)
        fail_build(
            context.sessions(),
            instance_uuid,
            kwargs.get("request_id", ""),
            exc,
            host=kwargs.get("host"),
        )


def abort_operation(errback: str, request: Any, exc: BaseException) -> bool:
    """The errbacks' common end: undo the failed step ``request`` as the operation table
    says its task runs (``compute.steps.abort``); nothing for a task that is no known
    operation, not one of ``errback``'s (an errback undoes its own family only) or names
    no instance."""
    kwargs = request.kwargs or {}
    op = operations.of_task(str(request.task), kwargs)
    if op is None or op.step is None or op.errback != errback:
        return False
    if not kwargs.get("instance_uuid"):
        return False
    return steps.abort(
        context.sessions(),
        op.step,
        kwargs["instance_uuid"],
        kwargs.get("request_id", ""),
        kwargs.get("host", ""),
        exc,
    )
