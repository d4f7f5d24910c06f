"""The durable record of operations in flight and its reaper (compute/in_flight.py),
through a real in-thread worker: a record lives exactly as long as its operation; a
message the broker lost is sent again; an operation whose host is down is undone with a
fault; a step whose worker died is sent again as soon as a new worker of its node starts.
The reaper's verdicts are also checked one by one as a table."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select, update

from compute import in_flight
from compute.instance_actions import latest_fault
from compute.instance_state import get_instance
from compute.periodic.reaper import reap_operations_in_flight
from compute.sessions import sessions_for
from models import Instance, OperationInFlight, TaskDelivery, utcnow
from models.db import session_scope
from tests.factories import make_settings, set_last_seen_up
from tests.unit.workflows.servers import (
    boot_active,
    clear_queues,
    delete_and_wait,
    in_thread_worker,
    periodic_context,
    queued,
)
from workflows import api

QUEUE = "compute.host1"


def _worker() -> Any:
    return in_thread_worker(("scheduler", QUEUE))


@pytest.fixture
def active(db_url: str) -> Iterator[str]:
    """An ACTIVE server on host1, deleted at the end by a worker of its own."""
    with _worker():
        uuid = boot_active()
    yield uuid
    clear_queues(QUEUE, "scheduler")
    with _worker():
        server = api.show(uuid)
        if server["status"] != "DELETED":
            delete_and_wait(uuid)


def _records(db_url: str) -> dict[str, OperationInFlight]:
    with session_scope(db_url) as session:
        rows = session.scalars(select(OperationInFlight)).all()
        return {r.instance_uuid: r for r in rows}


def _reap(db_url: str, later_s: float = 0.0, **settings: Any) -> dict[str, Any]:
    ctx = periodic_context(db_url, **settings)
    now = utcnow() + dt.timedelta(seconds=later_s)
    return in_flight.reap(ctx.sessions, ctx.settings, _resend, _undo, now=now)


def _resend(message: in_flight.Message) -> None:
    from compute.periodic.reaper import resend

    resend(message)


def _undo(message: in_flight.Message, exc: BaseException) -> None:
    from compute.periodic.reaper import undo

    undo(message, exc)


def test_a_record_lives_as_long_as_its_operation(active: str, db_url: str) -> None:
    assert _records(db_url) == {}  # the boot ended: its record went with its last step
    request_id = api.stop(active)
    row = _records(db_url)[active]  # no worker yet: the message waits, recorded
    assert row.request_id == request_id
    assert row.task_state == "powering-off"
    assert row.message["signature"]["task"] == "compute.stop_instance"
    with _worker():
        api.wait(active, "SHUTOFF", timeout=30)
    assert _records(db_url) == {}


def test_a_message_the_broker_lost_is_sent_again(active: str, db_url: str) -> None:
    api.stop(active)
    clear_queues(QUEUE)  # the broker loses the message
    assert _reap(db_url) == {}  # not yet late: nothing done
    assert _reap(db_url, later_s=5, operation_lost_after=2) == {"resend": [active]}
    assert queued(QUEUE) == 1
    with _worker():
        api.wait(active, "SHUTOFF", timeout=30)
    assert _records(db_url) == {}


def test_an_operation_sent_too_often_without_progress_is_undone(active: str, db_url: str) -> None:
    api.stop(active)
    clear_queues(QUEUE)
    shrunk: dict[str, Any] = {"operation_lost_after": 2, "operation_max_resends": 1}
    assert _reap(db_url, later_s=5, **shrunk) == {"resend": [active]}
    clear_queues(QUEUE)  # lost again
    summary = _reap(db_url, later_s=10, **shrunk)
    assert summary == {"undo": [active]}
    with session_scope(db_url) as session:
        instance = get_instance(session, active)
        assert (instance.vm_state, instance.task_state) == ("active", None)
        fault = latest_fault(session, active)
        assert fault is not None and "did not complete" in fault.message
    assert _records(db_url) == {}


def test_an_operation_whose_host_is_down_is_undone_and_its_late_message_skipped(
    active: str, db_url: str
) -> None:
    api.stop(active)
    set_last_seen_up(db_url, utcnow() - dt.timedelta(seconds=3600), "host1")
    # First seen down: watched, not believed yet (heartbeats missed during a database
    # outage look the same); still down a few report intervals later: undone.
    assert _reap(db_url) == {}
    summary = _reap(db_url, later_s=30)
    assert summary == {"undo": [active]}
    with session_scope(db_url) as session:
        instance = get_instance(session, active)
        assert (instance.vm_state, instance.task_state) == ("active", None)
    assert queued(QUEUE) == 1
    with _worker():  # the host comes back: its stale stop finds nothing to do
        deadline = utcnow() + dt.timedelta(seconds=20)
        while queued(QUEUE) and utcnow() < deadline:
            pass
        assert api.show(active)["status"] == "ACTIVE"


def test_a_step_whose_worker_died_is_sent_again_when_a_new_worker_starts(
    active: str, db_url: str
) -> None:
    api.stop(active)
    row = _records(db_url)[active]
    # The step had been delivered to a worker of node compute@host1 that was then killed.
    with session_scope(db_url) as session:
        session.add(
            TaskDelivery(
                task_id=row.task_id,
                task_name="compute.stop_instance",
                attempts=1,
                worker="compute@host1",
                host="host1",
            )
        )
    clear_queues(QUEUE)  # its unacked message waits for the visibility timeout
    assert _reap(db_url, later_s=20, operation_lost_after=2) == {}  # running: left alone
    assert in_flight.orphan_deliveries(sessions_for(db_url), "compute@host1") == 1
    assert _reap(db_url) == {"resend": [active]}
    assert queued(QUEUE) == 1
    assert _reap(db_url) == {}  # sent once: the copy is awaited, not sent again
    with _worker():
        api.wait(active, "SHUTOFF", timeout=30)
    assert _records(db_url) == {}


def test_the_reaper_runs_as_a_cluster_periodic_task(active: str, db_url: str) -> None:
    api.stop(active)
    clear_queues(QUEUE)
    assert reap_operations_in_flight(periodic_context(db_url, operation_lost_after=5)) == {}
    with session_scope(db_url) as session:
        session.execute(
            update(OperationInFlight).values(updated_at=utcnow() - dt.timedelta(seconds=10))
        )
    summary = reap_operations_in_flight(periodic_context(db_url, operation_lost_after=5))
    assert summary == {"resend": [active]}
    assert queued(QUEUE) == 1
    with _worker():
        api.wait(active, "SHUTOFF", timeout=30)


# -- the verdicts, one by one ---------------------------------------------------------------

NOW = dt.datetime(2026, 11, 24, 12, 0, 0)


def _row(
    idle_s: float = 0,
    resent: int = 0,
    task_state: str | None = "powering-off",
    down_s: float | None = None,
) -> Any:
    return OperationInFlight(
        host_down_since=None if down_s is None else NOW - dt.timedelta(seconds=down_s),
        instance_uuid="u",
        request_id="req-1",
        task_state=task_state,
        message={"signature": {"task": "compute.stop_instance", "kwargs": {}}},
        task_id="t",
        resent=resent,
        updated_at=NOW - dt.timedelta(seconds=idle_s),
    )


def _instance(task_state: str | None = "powering-off", deleted: bool = False) -> Any:
    return Instance(uuid="u", task_state=task_state, deleted=deleted)


def _delivery(worker: str | None = "compute@host1", orphaned: bool = False) -> Any:
    return TaskDelivery(
        task_id="t", task_name="x", worker=worker, orphaned_at=NOW if orphaned else None
    )


VERDICTS = [
    ("instance gone", _row(), None, None, True, "stale"),
    ("instance deleted", _row(), _instance(deleted=True), None, True, "stale"),
    ("operation ended", _row(), _instance(task_state=None), None, True, "stale"),
    ("step running on a live host", _row(9999), _instance(), _delivery(), True, "running"),
    ("worker died and restarted", _row(), _instance(), _delivery(orphaned=True), True, "resend"),
    ("host first seen down", _row(), _instance(), _delivery(), False, "suspect"),
    ("host seen down briefly", _row(down_s=5), _instance(), _delivery(), False, "wait"),
    ("host seen down long enough", _row(down_s=30), _instance(), _delivery(), False, "undo"),
    ("host down, message queued", _row(down_s=30), _instance(), None, False, "undo"),
    ("queued, not late yet", _row(30), _instance(), None, True, "wait"),
    ("queued, late: lost", _row(61), _instance(), None, True, "resend"),
    ("scheduler step lost", _row(61), _instance(), None, None, "resend"),
    ("sent too often", _row(61, resent=3), _instance(), None, True, "undo"),
    ("resent copy not started", _row(61), _instance(), _delivery(worker=None), True, "resend"),
]


@pytest.mark.parametrize(
    ("row", "instance", "delivery", "host_up", "expected"),
    [v[1:] for v in VERDICTS],
    ids=[v[0] for v in VERDICTS],
)
def test_the_reapers_verdicts(
    row: Any, instance: Any, delivery: Any, host_up: bool | None, expected: str
) -> None:
    settings = make_settings(operation_lost_after=60, operation_max_resends=3)
    assert in_flight.judge(row, instance, delivery, host_up, settings, NOW).action == expected
