"""Tasks named, not imported: the canvas builders make their signatures from the names
the tasks are registered under (``@app.task(name=...)`` in ``tasks/``), on the app of
``novaq.celery_app``, so ``workflows/`` never imports ``tasks/``.

A signature of a task this process has not loaded is still sent right: Celery publishes
it by name (``send_task``), routed by ``celeryconfig``'s router from its ``host`` keyword,
and the worker that consumes it has the task. ``tests/unit/workflows/test_canvas.py``
checks every name used here is a registered task.

Every step shows in Flower with the server it acts on: Flower's task list shows (and its
search reads) a task's ``argsrepr`` and ``kwargsrepr``, so a step's ``argsrepr`` names the
instance(s) and the request, and its ``kwargsrepr`` keeps the ids first and shortens the
bulky values (a request spec, alternates) that Celery would otherwise cut off at 1 KiB.
"""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature

from novaq.celery_app import app

#: Keyword arguments shown in full in Flower; the others are shortened past this length.
IDS = ("instance_uuid", "instance_uuids", "migration_uuid", "request_id", "host", "node")
SHORT_REPR = 60


def step(task_name: str, **kwargs: Any) -> Signature:
    """The task ``task_name`` with these keyword arguments, immutable (a step of a chain
    never takes its predecessor's result)."""
    return app.signature(task_name, kwargs=kwargs, immutable=True, **flower_reprs(kwargs))


def errback(task_name: str) -> Signature:
    """An error callback by name: Celery calls it with the failed step's request, the
    exception and the traceback."""
    return app.signature(task_name)


def flower_reprs(kwargs: dict[str, Any]) -> dict[str, str]:
    """``argsrepr`` and ``kwargsrepr`` for a step acting on an instance (nothing for a
    step that acts on none: Celery's own reprs then)."""
    uuids = kwargs.get("instance_uuids") or (
        [kwargs["instance_uuid"]] if kwargs.get("instance_uuid") else []
    )
    if not uuids:
        return {}
    label = " ".join(f"instance={u}" for u in uuids)
    if kwargs.get("request_id"):
        label += f" request={kwargs['request_id']}"
    first = [k for k in IDS if k in kwargs]
    rest = [k for k in kwargs if k not in IDS]
    shown = ", ".join(f"{k!r}: {_short(kwargs[k], k in IDS)}" for k in first + rest)
    return {"argsrepr": label, "kwargsrepr": "{" + shown + "}"}


def _short(value: Any, whole: bool) -> str:
    text = repr(value)
    if whole or len(text) <= SHORT_REPR:
        return text
    return text[: SHORT_REPR - 3] + "..."
