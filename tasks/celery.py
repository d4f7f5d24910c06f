"""The Celery application as a worker runs it: the app of ``novaq.celery_app`` (the one
the public API publishes through), plus the task modules a worker loads, novaq's worker
bootstep (service registration, heartbeats, compute-node record) and the fork-safety
hook."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_init, worker_process_init

from compute.in_flight import orphan_deliveries
from compute.sessions import sessions_for
from models.db import dispose_after_fork
from novaq.celery_app import app
from novaq.settings import get_settings
from tasks.bootsteps import NovaqServiceStep

LOG = logging.getLogger(__name__)

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


@worker_process_init.connect
def _dispose_inherited_connections(**_: object) -> None:
    # No pooled database connection may be shared across a fork.
    dispose_after_fork()


@worker_init.connect
def _orphan_former_deliveries(sender: Any = None, **_: object) -> None:
    # Before this worker takes a message: whatever a former worker of the same node had
    # in flight died with it; the reaper sends those steps again at its next pass, instead
    # of their waiting out the broker's visibility timeout (compute/in_flight.py).
    worker = getattr(sender, "hostname", None)
    if not worker:
        return
    try:
        count = orphan_deliveries(sessions_for(get_settings().sqlalchemy_url), worker)
    except Exception:  # noqa: BLE001 - the database may be down at start; the reaper still sees the host
        LOG.warning("Could not look for steps a former %s left in flight", worker, exc_info=True)
        return
    if count:
        LOG.warning("%d step(s) a former %s had in flight will be sent again", count, worker)


__all__ = ["app"]
