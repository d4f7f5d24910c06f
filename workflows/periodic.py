"""Sending periodic tasks by name (they run in ``tasks/periodic.py``): to one host's queue
with ``expires`` = their spacing, to every schedulable host, or once for the cluster.

Used by beat's fan-out, by a compute worker that (re)starts (Nova's ``run_immediately``)
and by the API's ``run_periodic_task``; none of them needs the task objects, only their
names (``compute/periodic/schedule.py``) and the app.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from compute.periodic.schedule import BY_NAME, CLUSTER, scheduled
from compute.servicegroup import COMPUTE, is_up
from models import Service
from models.db import session_scope
from novaq.celery_app import app
from novaq.settings import get_settings


def schedulable_hosts() -> list[str]:
    """Compute hosts that are up, enabled and not forced down, by name."""
    s = get_settings()
    with session_scope(s.sqlalchemy_url) as session:
        services = session.scalars(
            select(Service).where(Service.binary == COMPUTE, Service.deleted == 0)
        ).all()
        return sorted(sv.host for sv in services if not sv.disabled and is_up(sv, s))


def send_to_host(task_name: str, host: str, expires_s: float) -> Any:
    """One periodic message for ``host``'s queue, dropped if not consumed in time."""
    return app.send_task(task_name, kwargs={"host": host}, expires=expires_s)


def send_now(name: str, host: str | None = None) -> list[str]:
    """Run one periodic task now (``novaq periodic-run``): on ``host``, or on every
    schedulable host for a per-host task when no host is given. The task ids."""
    task = BY_NAME[name]
    s = get_settings()
    expires = task.effective_spacing(s) or s.periodic.default_spacing
    if task.scope == CLUSTER:
        return [app.send_task(task.task_name, expires=expires).id]
    hosts = [host] if host else schedulable_hosts()
    return [send_to_host(task.task_name, h, expires).id for h in hosts]


def queue_run_immediately(host: str) -> list[str]:
    """Nova runs its ``run_immediately`` periodic tasks at the first tick of a service;
    a compute worker that (re)starts queues them for itself, consumed once it is ready."""
    sent = []
    for task, spacing in scheduled(get_settings()):
        if task.per_host and task.run_immediately:
            send_to_host(task.task_name, host, float(spacing))
            sent.append(task.name)
    return sent
