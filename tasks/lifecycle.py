"""Compute-queue tasks for the life of a server: thin wrappers over ``compute/lifecycle.py``.

Each is routed to ``compute.<host>`` by its ``host`` keyword; ``on_lifecycle_error`` is the
errback the API links to every one of them (it runs in the worker where the step failed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.utils.log import get_task_logger

from compute import lifecycle, notifications
from tasks import context
from tasks.celery import app
from tasks.compute import check_host

LOG = get_task_logger(__name__)

Operation = Callable[..., str]


# Nova's versioned notification name of each operation (NOVA_BEHAVIOUR.md §10).
EVENTS = {
    "stop_instance": "power_off",
    "start_instance": "power_on",
    "reboot_instance": "reboot",
    "pause_instance": "pause",
    "unpause_instance": "unpause",
    "suspend_instance": "suspend",
    "resume_instance": "resume",
    "rescue_instance": "rescue",
    "unrescue_instance": "unrescue",
}


def _run(
    operation: Operation, instance_uuid: str, request_id: str, host: str, **kw: Any
) -> dict[str, str]:
    check_host(host)
    event = EVENTS.get(operation.__name__, operation.__name__.removesuffix("_instance"))
    with notifications.notified(context.db_url(), event, instance_uuid, host, request_id):
        outcome = operation(
            context.db_url(), context.driver(), instance_uuid, request_id, host, **kw
        )
    return {"instance_uuid": instance_uuid, "outcome": outcome}


@app.task(name="compute.stop_instance")
def stop_instance(
    instance_uuid: str, request_id: str, host: str, clean_shutdown: bool = True
) -> dict[str, str]:
    """``clean_shutdown`` False is ``force_stop``: destroyed at once (Nova's)."""
    return _run(
        lifecycle.stop_instance,
        instance_uuid,
        request_id,
        host,
        clean_shutdown=bool(clean_shutdown),
        shutdown_timeout_s=context.settings().shutdown_timeout,
    )


@app.task(name="compute.start_instance")
def start_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(lifecycle.start_instance, instance_uuid, request_id, host)


@app.task(name="compute.reboot_instance")
def reboot_instance(
    instance_uuid: str, request_id: str, host: str, hard: bool = False
) -> dict[str, str]:
    return _run(lifecycle.reboot_instance, instance_uuid, request_id, host, hard=bool(hard))


@app.task(name="compute.pause_instance")
def pause_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(lifecycle.pause_instance, instance_uuid, request_id, host)


@app.task(name="compute.unpause_instance")
def unpause_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(lifecycle.unpause_instance, instance_uuid, request_id, host)


@app.task(name="compute.suspend_instance")
def suspend_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(lifecycle.suspend_instance, instance_uuid, request_id, host)


@app.task(name="compute.resume_instance")
def resume_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(lifecycle.resume_instance, instance_uuid, request_id, host)


@app.task(name="compute.rescue_instance")
def rescue_instance(
    instance_uuid: str, request_id: str, host: str, rescue_image_ref: str | None = None
) -> dict[str, str]:
    return _run(
        lifecycle.rescue_instance,
        instance_uuid,
        request_id,
        host,
        shutdown_timeout_s=context.settings().shutdown_timeout,
        rescue_image_ref=rescue_image_ref,
    )


@app.task(name="compute.unrescue_instance")
def unrescue_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return _run(lifecycle.unrescue_instance, instance_uuid, request_id, host)


def step_name(request: Any) -> str:
    """The operation a failed step was: ``compute.<name>_instance`` -> ``<name>``."""
    return str(request.task).removeprefix("compute.").removesuffix("_instance")


def abort_step(
    request: Any,
    exc: BaseException,
    op: lifecycle.Operation | None,
    abort: Callable[..., bool] = lifecycle.abort,
) -> None:
    """The errbacks' common end: undo the failed step ``request`` as ``op`` (``abort``);
    nothing for a task that is no known operation or names no instance."""
    kwargs = request.kwargs or {}
    if op is None or not kwargs.get("instance_uuid"):
        return
    abort(
        context.db_url(),
        kwargs["instance_uuid"],
        kwargs.get("request_id", ""),
        kwargs.get("host", ""),
        op,
        exc,
    )


@app.task(name="scheduler.on_lifecycle_error", count_deliveries=False)
def on_lifecycle_error(request: Any, exc: BaseException, traceback: Any) -> None:
    """Undo a lifecycle step that failed before its own handling ran (delivery limit,
    wrong host); a no-op when the step already compensated."""
    name = step_name(request)
    if name == "reboot" and (request.kwargs or {}).get("hard"):
        name = "reboot_hard"
    abort_step(request, exc, lifecycle.OPERATIONS.get(name))
