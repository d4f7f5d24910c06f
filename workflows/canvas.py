"""Tasks named, not imported: the canvas builders make their signatures from the names
the tasks are registered under (``@app.task(name=...)`` in ``tasks/``), on the app of
``novaq.celery_app``, so ``workflows/`` never imports ``tasks/``.

A signature of a task this process has not loaded is still sent right: Celery publishes
it by name (``send_task``), routed by ``celeryconfig``'s router from its ``host`` keyword,
and the worker that consumes it has the task. ``tests/unit/workflows/test_canvas.py``
checks every name used here is a registered task.
"""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature

from novaq.celery_app import app


def step(task_name: str, **kwargs: Any) -> Signature:
    """The task ``task_name`` with these keyword arguments, immutable (a step of a chain
    never takes its predecessor's result)."""
    return app.signature(task_name, kwargs=kwargs, immutable=True)


def errback(task_name: str) -> Signature:
    """An error callback by name: Celery calls it with the failed step's request, the
    exception and the traceback."""
    return app.signature(task_name)
