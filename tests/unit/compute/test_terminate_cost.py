"""What one terminate costs the database (issue 16, goal 1): its statements and its
commits, counted through a real in-thread worker, attributed to the task whose thread ran
them. The instance-action event opens and closes with plain INSERT / UPDATE statements,
and ``release`` finds what the instance holds in one query.

The durable records stay whole: the event closes ``Success`` with its action, the
allocations are gone and the step record says ``success`` after one delivery.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery.signals import task_postrun, task_prerun
from sqlalchemy import Engine, event, func, select

from compute import notifications
from models import (
    Allocation,
    InstanceAction,
    InstanceActionEvent,
    StepRecord,
    TaskDelivery,
)
from models.db import session_scope
from tests.unit.workflows.servers import boot_active, delete_and_wait, in_thread_worker
from workflows import api

TERMINATE = "compute.terminate_instance"


class Seen:
    """The statements (BEGIN aside) and COMMITs of the terminate task's thread, while on."""

    def __init__(self) -> None:
        self.on = False
        self.statements: list[str] = []
        self.commits = 0
        self._task = threading.local()

    def _counted(self) -> bool:
        return self.on and getattr(self._task, "name", None) == TERMINATE

    def started(self, sender: Any = None, **_: Any) -> None:
        self._task.name = getattr(sender, "name", None)

    def ended(self, sender: Any = None, **_: Any) -> None:
        self._task.name = None

    def statement(self, conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if self._counted() and not statement.lstrip().upper().startswith("BEGIN"):
            self.statements.append(statement)

    def commit(self, conn: Any) -> None:
        if self._counted():
            self.commits += 1


@pytest.fixture
def seen() -> Iterator[Seen]:
    found = Seen()
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
    deadline = time.monotonic() + 10
    while True:
        with session_scope(db_url) as session:
            left = session.scalar(select(func.count()).select_from(TaskDelivery))
        if left == 0:
            return
        assert time.monotonic() < deadline, f"{left} delivery rows left"
        time.sleep(0.05)


def _terminated(db_url: str, uuid: str) -> None:
    """Start of the terminate's records: event Success, action finished, nothing held."""
    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction).where(
                InstanceAction.instance_uuid == uuid, InstanceAction.action == "delete"
            )
        ).one()
        [event_] = session.scalars(
            select(InstanceActionEvent).where(InstanceActionEvent.action_id == action.id)
        ).all()
        assert (event_.event, event_.result, event_.host) == (
            "compute_terminate_instance",
            "Success",
            "host1",
        )
        assert event_.finish_time is not None and action.finish_time is not None
        held = select(func.count()).select_from(Allocation).where(Allocation.consumer_uuid == uuid)
        assert session.scalar(held) == 0
        record = session.scalars(
            select(StepRecord).where(
                StepRecord.instance_uuid == uuid, StepRecord.task_name == TERMINATE
            )
        ).one()
        assert (record.outcome, record.deliveries) == ("success", 1)


def test_a_terminate_is_two_commits_of_at_most_17_statements(db_url: str, seen: Seen) -> None:
    with in_thread_worker():
        warm = boot_active("warm")  # the flavor, the first connections, the caches
        uuid = boot_active("counted")
        notifications.install(None)  # what they cost is counted in compute.notifications
        _settled(db_url)
        seen.on = True
        api.delete(uuid)
        api.wait(uuid, "DELETED", timeout=30)
        _settled(db_url)
        seen.on = False
        delete_and_wait(warm)
    print("\n" + "\n".join(s.split("\n")[0][:120] for s in seen.statements))
    assert seen.commits == 2  # begin (event open, delivery start), finish
    assert len(seen.statements) <= 17  # 25 before its event and release were trimmed
    _terminated(db_url, uuid)
