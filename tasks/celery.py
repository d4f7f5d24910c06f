"""The Celery application as a worker runs it: the app of ``novaq.celery_app`` (the one
the public API publishes through), plus the task modules a worker loads, novaq's worker
bootsteps (service registration, heartbeats, compute-node record; the run-immediately
periodic tasks once connected to the broker), the fork-safety hook, and a worker's
publish retry policy."""

from __future__ import annotations

import gc
from typing import Any

from celery.signals import worker_init, worker_process_init, worker_ready

from models.db import dispose_after_fork, patient_writers
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
    "tasks.rebuild",
]
app.steps["worker"].add(NovaqServiceStep)
app.steps["consumer"].add(RunImmediately)

#: What a worker publishes (a chain's next step, a replacement, an errback's message)
#: follows work already committed, so it is retried for about a minute (0, 0.5, then 1 s
#: apart), long enough for a broker restart, instead of the API's fail-fast policy
#: (``celeryconfig.task_publish_retry_policy``). Celery 5.7 caps a callback's retries at
#: ``max_retries`` (never unbounded). See docs/reliability.md.
WORKER_PUBLISH_RETRY_POLICY = {
    "max_retries": 60,
    "interval_start": 0,
    "interval_step": 0.5,
    "interval_max": 1,
}


@worker_init.connect
def _publish_until_the_broker_is_back(sender: Any, **_: object) -> None:
    # NOTE: before the worker's first publish: Celery reads the default policy once, when
    # it builds its task sender.
    sender.app.conf.task_publish_retry_policy = dict(WORKER_PUBLISH_RETRY_POLICY)


@worker_init.connect
def _writers_wait_patiently(**_: object) -> None:
    # A worker's steps run in the background, several at once: its writers wait for
    # SQLite's write lock in SQLite's busy handler, leaving the cores to the steps; the
    # API's, which a caller waits on, poll it (``models.db.patient_writers``). Before the
    # pool forks: its children inherit it.
    patient_writers()


@worker_process_init.connect
def _dispose_inherited_connections(**_: object) -> None:
    # No pooled database connection may be shared across a fork.
    dispose_after_fork()
    freeze_start_up_heap()


@worker_ready.connect
def _freeze_when_ready(**_: object) -> None:
    # The threads pool (compute workers) runs its steps in this process.
    freeze_start_up_heap()


def freeze_start_up_heap() -> None:
    """Move what the worker holds once started (its modules, models, app: ~130,000
    objects) out of the cyclic garbage collector's reach. It lives as long as the
    process, yet every full collection walked it again: ~90 ms of CPU each, a few
    milliseconds per step on average (issue 16). What steps allocate afterwards is
    collected as before."""
    gc.freeze()


__all__ = ["app"]
