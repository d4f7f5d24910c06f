"""Compute-queue tasks for soft delete and restore: thin wrappers over
``compute/soft_delete.py``, with their errback (it runs in the worker where the step
failed). The reclaim is a plain function, ``compute.soft_delete.reclaim_queued_deletes``."""

from __future__ import annotations

from typing import Any

from compute import soft_delete
from tasks.celery import app
from tasks.lifecycle import _run, abort_step, step_name


@app.task(name="compute.soft_delete_instance")
def soft_delete_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(soft_delete.soft_delete_instance, instance_uuid, request_id, host)


@app.task(name="compute.restore_instance")
def restore_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(soft_delete.restore_instance, instance_uuid, request_id, host)


@app.task(name="scheduler.on_soft_delete_error", count_deliveries=False)
def on_soft_delete_error(request: Any, exc: BaseException, traceback: Any) -> None:
    """Undo a soft delete / restore that failed before its own handling ran."""
    abort_step(request, exc, soft_delete.OPERATIONS.get(step_name(request)))
