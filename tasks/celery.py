"""The Celery application as a worker runs it: the app of ``novaq.celery_app`` (the one
the public API publishes through), plus the task modules a worker loads, novaq's worker
bootsteps (service registration, heartbeats, compute-node record; the run-immediately
periodic tasks once connected to the broker) and the fork-safety hook."""

from __future__ import annotations

from celery.signals import worker_process_init

from models.db import dispose_after_fork
from novaq.celery_app import app
from tasks.bootsteps import NovaqServiceStep, RunImmediately

app.conf.include = [
    "tasks.scheduler",
    "tasks.compute",
    "tasks.lifecycle",
    "tasks.shelve",
    "tasks.soft_delete",
    "tasks.moves",
    "tasks.errbacks",
    "tasks.periodic",
]
app.steps["worker"].add(NovaqServiceStep)
app.steps["consumer"].add(RunImmediately)


@worker_process_init.connect
def _dispose_inherited_connections(**_: object) -> None:
    # No pooled database connection may be shared across a fork.
    dispose_after_fork()


__all__ = ["app"]
