"""Beat-driven maintenance: beat publishes one fan-out task; the fan-out sends the
per-host step to every up and enabled compute host, with ``expires`` so a down host's
queue never piles up."""

from __future__ import annotations

from sqlalchemy import select

from compute.servicegroup import COMPUTE, is_up
from models import Service
from models.db import session_scope
from tasks import context
from tasks.celery import app


@app.task(name="periodic.fan_out", acks_late=False, count_deliveries=False)
def fan_out(task_name: str, expires_s: float) -> list[str]:
    s = context.settings()
    with session_scope(context.db_url()) as session:
        services = session.scalars(
            select(Service).where(Service.binary == COMPUTE, Service.deleted == 0)
        ).all()
        hosts = [sv.host for sv in services if not sv.disabled and is_up(sv, s)]
    for host in hosts:
        app.send_task(task_name, kwargs={"host": host}, expires=expires_s)
    return hosts
