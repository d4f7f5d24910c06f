"""The one Celery application object, below everything that sends or runs tasks.

The public API names tasks by string (``app.signature("compute.stop_instance", ...)``) and
publishes through this app, so it never imports ``tasks/``; ``tasks/celery.py`` takes the
same object and adds what only a worker needs (the task modules to load, the service
bootstep, the fork hook). Configured from ``celeryconfig`` (settings only); the task base
class and the router are named by string too, resolved by Celery when first needed.
"""

from __future__ import annotations

from celery import Celery

app = Celery("novaq", task_cls="tasks.base:NovaqTask")
app.config_from_object("celeryconfig")

__all__ = ["app"]
