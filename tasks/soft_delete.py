"""Compute-queue tasks for soft delete and restore (rows of ``compute.operations``), with
their errback (it runs in the worker where the step failed). The reclaim is a plain
function, ``compute.soft_delete.reclaim_queued_deletes``."""

from __future__ import annotations

from typing import Any

from novaq.celery_app import app
from tasks.errbacks import abort_operation
from tasks.lifecycle import host_task

soft_delete_instance = host_task("soft_delete")
restore_instance = host_task("restore")


@app.task(name="scheduler.on_soft_delete_error", count_deliveries=False)
def on_soft_delete_error(request: Any, exc: BaseException, traceback: Any) -> None:
    """Undo a soft delete / restore that failed before its own handling ran."""
    abort_operation("scheduler.on_soft_delete_error", request, exc)
