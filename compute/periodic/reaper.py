"""The reaper of operations in flight, as a cluster periodic task: the pass of
``compute.in_flight.reap`` with Celery to send a step again and the operation's own error
callback to undo it (the same idempotent undo the errback runs when a step fails)."""

from __future__ import annotations

from typing import Any

from celery.app.task import Context

from compute import in_flight
from compute.periodic import PeriodicContext
from novaq.celery_app import app


def resend(message: in_flight.Message) -> None:
    """Send the recorded message again, with its task id (see ``compute.in_flight``)."""
    options: dict[str, Any] = {}
    if message.get("chain"):
        options["chain"] = message["chain"]
    for key in ("root_id", "parent_id"):
        if message.get(key):
            options[key] = message[key]
    app.signature(message["signature"]).apply_async(**options)


def undo(message: in_flight.Message, exc: BaseException) -> None:
    """Run the operation's error callbacks in this process, as Celery runs a new-style
    errback (``request, exc, traceback``) when a step fails. Raises when there is none
    to run, so the record stays for the next pass."""
    first = in_flight.first_task(message.get("signature") or {})
    options = first.get("options") or {}
    request = Context(
        task=first.get("task"),
        id=options.get("task_id"),
        args=[],
        kwargs=dict(first.get("kwargs") or {}),
    )
    names = [e.get("task") for e in options.get("link_error") or () if isinstance(e, dict)]
    if not names:
        raise LookupError(f"{first.get('task')} has no error callback to undo it with")
    for name in names:
        task = app.tasks.get(name)
        if task is None:
            # Not loaded in this process yet (a worker loads the task modules on start).
            app.loader.import_default_modules()
            task = app.tasks[name]
        task(request, exc, None)


def reap_operations_in_flight(ctx: PeriodicContext) -> dict[str, Any]:
    return in_flight.reap(ctx.sessions, ctx.settings, resend, undo)
