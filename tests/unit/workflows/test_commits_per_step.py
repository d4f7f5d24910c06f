"""What one boot and one delete cost the database, step by step (issue 16, goal 1), counted
through a real in-thread worker: COMMITs and statements per task, from SQLAlchemy's
engine events, attributed to the task whose thread ran them.

A step's delivery record rides the step's own transactions (``compute.delivery_ledger``):
the build and the terminate are their begin and their finish, and nothing else; the
scheduler step is its claim, which carries its hand-over to the build (its candidates'
read is read-only). With the API's one commit (``test_api_boot_cost``), a boot writes 4
commits: API 1, scheduler 1, build 2. Versioned notifications are switched off here:
what they cost is counted where they are made (``compute.notifications``).

The durable records stay whole: every step has its step record (one delivery, its
outcome), and no delivery row nor operation record is left once the server settled.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import task_postrun, task_prerun
from sqlalchemy import Engine, event, func, select

from compute import notifications
from models import OperationInFlight, StepRecord, TaskDelivery
from models.db import session_scope
from tests.unit.workflows.servers import boot_active, delete_and_wait, in_thread_worker
from workflows import api

SCHEDULER, BUILD, TERMINATE = (
    "scheduler.select_destinations",
    "compute.build_and_run_instance",
    "compute.terminate_instance",
)


class Counts:
    """COMMITs and statements (BEGIN aside) per task, while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.commits: collections.Counter[str] = collections.Counter()
        self.statements: collections.Counter[str] = collections.Counter()
        self._task = threading.local()

    def task(self) -> str | None:
        return getattr(self._task, "name", None)

    def started(self, sender: Any = None, **_: Any) -> None:
        self._task.name = getattr(sender, "name", None)

    def ended(self, sender: Any = None, **_: Any) -> None:
        self._task.name = None

    def commit(self, conn: Any) -> None:
        if self.on and self.task():
            self.commits[str(self.task())] += 1

    def statement(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if self.on and self.task() and not statement.lstrip().upper().startswith("BEGIN"):
            self.statements[str(self.task())] += 1

    def take(self) -> tuple[dict[str, int], dict[str, int]]:
        taken = dict(self.commits), dict(self.statements)
        self.commits.clear()
        self.statements.clear()
        return taken


@pytest.fixture
def counts(db_url: str) -> Iterator[Counts]:
    found = Counts()
    hooks = [(Engine, "commit", found.commit), (Engine, "before_cursor_execute", found.statement)]
    for target, name, fn in hooks:
        event.listen(target, name, fn)
    task_prerun.connect(found.started, weak=False)
    task_postrun.connect(found.ended, weak=False)
    try:
        yield found
    finally:
        task_prerun.disconnect(found.started)
        task_postrun.disconnect(found.ended)
        for target, name, fn in hooks:
            event.remove(target, name, fn)


def _settled(db_url: str) -> None:
    """Every step has returned (its after_return done): no delivery row left."""
    deadline = time.monotonic() + 10
    while True:
        with session_scope(db_url) as session:
            left = session.scalar(select(func.count()).select_from(TaskDelivery))
        if left == 0:
            return
        assert time.monotonic() < deadline, f"{left} delivery rows left"
        time.sleep(0.05)


def _records(db_url: str, uuid: str) -> list[tuple[str, str | None, int]]:
    with session_scope(db_url) as session:
        rows = session.scalars(
            select(StepRecord).where(StepRecord.instance_uuid == uuid).order_by(StepRecord.id)
        ).all()
        assert session.scalar(select(func.count()).select_from(OperationInFlight)) == 0
        return [(r.task_name, r.outcome, r.deliveries) for r in rows]


def test_a_boot_costs_one_commit_to_schedule_and_two_per_host_step(
    db_url: str, counts: Counts
) -> None:
    with in_thread_worker():
        warm = boot_active("warm")  # the flavor, the first connections, the caches
        notifications.install(None)
        counts.on = True
        uuid = boot_active("counted")
        _settled(db_url)
        boot_commits, boot_statements = counts.take()
        api.delete(uuid)
        api.wait(uuid, "DELETED", timeout=30)
        _settled(db_url)
        delete_commits, delete_statements = counts.take()
        counts.on = False
        delete_and_wait(warm)  # no guest left behind for the next test
    print(f"\nboot: commits {boot_commits} statements {boot_statements}")
    print(f"delete: commits {delete_commits} statements {delete_statements}")
    assert boot_commits == {SCHEDULER: 1, BUILD: 2}  # claim + hand-over; begin, finish
    assert delete_commits == {TERMINATE: 2}
    # Statements (BEGIN aside): a guard against added round trips.
    assert boot_statements[BUILD] <= 24
    assert boot_statements[SCHEDULER] <= 17
    assert delete_statements[TERMINATE] <= 30
    assert _records(db_url, uuid) == [
        (SCHEDULER, "success", 1),
        (BUILD, "success", 1),
        (TERMINATE, "success", 1),
    ]
