"""The Celery application: configured from ``celeryconfig``, with novaq's worker bootstep
(service registration, heartbeats, compute-node record) and the fork-safety hook."""

from __future__ import annotations

from celery import Celery
from celery.signals import worker_process_init

from models.db import dispose_after_fork

app = Celery("novaq", task_cls="tasks.base:NovaqTask")
app.config_from_object("celeryconfig")
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


@worker_process_init.connect
def _dispose_inherited_connections(**_: object) -> None:
    # No pooled database connection may be shared across a fork.
    dispose_after_fork()


def _install_bootsteps() -> None:
    from tasks.bootsteps import NovaqServiceStep

    app.steps["worker"].add(NovaqServiceStep)


_install_bootsteps()
