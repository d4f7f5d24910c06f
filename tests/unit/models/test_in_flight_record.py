"""``compute.in_flight.record`` of an instance that may have a record already (the API's
delete, a step's start that finds none): inserted, or replaced in one statement, on
SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select

from compute import in_flight
from models import OperationInFlight
from models.db import get_engine, session_scope
from models.migrate import upgrade
from tests.factories import make_instance

UUID = "0f6c3a52-8d0b-4c2e-9f7a-2b1d5e4c3a10"


@pytest.fixture
def sqlite_url(empty_sqlite_url: str) -> str:
    upgrade(empty_sqlite_url)
    return empty_sqlite_url


@pytest.fixture
def pg_url(empty_pg_url: str) -> str:
    upgrade(empty_pg_url)
    return empty_pg_url


def _message(task_id: str, request_id: str) -> dict[str, Any]:
    signature = {
        "task": "compute.terminate_instance",
        "args": [],
        "kwargs": {"instance_uuid": UUID, "request_id": request_id, "host": "host1"},
        "options": {"task_id": task_id},
    }
    return in_flight.message_of_signature(signature)


def _record(url: str, task_id: str, request_id: str, task_state: str) -> list[str]:
    """Record the message; returns the statements that wrote it (SQLite's BEGIN aside)."""
    with _statements(url) as statements, session_scope(url) as session:
        in_flight.record(session, _message(task_id, request_id), task_states={UUID: task_state})
    return statements


@contextmanager
def _statements(url: str) -> Iterator[list[str]]:
    """The statements run while the block runs (SQLite's BEGIN aside), first words."""
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if not statement.startswith("BEGIN"):
            statements.append(statement.split(None, 1)[0].upper())

    event.listen(get_engine(url), "before_cursor_execute", seen)
    try:
        yield statements
    finally:
        event.remove(get_engine(url), "before_cursor_execute", seen)


def _row(url: str) -> OperationInFlight:
    with session_scope(url) as session:
        row = session.scalars(select(OperationInFlight)).one()
        session.expunge(row)
        return row


def test_a_record_is_inserted_or_replaced_in_one_statement(url: str) -> None:
    assert _record(url, "task-1", "req-1", "deleting") == ["INSERT"]
    first = _row(url)
    with session_scope(url) as session:  # the reaper sent it twice
        session.get_one(OperationInFlight, UUID).resent = 2

    assert _record(url, "task-2", "req-1", "deleting") == ["INSERT"]  # the same request
    again = _row(url)
    assert (again.task_id, again.resent, again.created_at) == ("task-2", 2, first.created_at)
    assert again.message["signature"]["options"]["task_id"] == "task-2"

    _record(url, "task-3", "req-2", "powering-off")  # another request: its count starts over
    other = _row(url)
    assert (other.request_id, other.task_state, other.resent) == ("req-2", "powering-off", 0)
    assert other.created_at == first.created_at and other.host_down_since is None


def _boot_message(task_id: str, uuids: list[str]) -> dict[str, Any]:
    signature = {
        "task": "compute.build_and_run_instance",
        "args": [],
        "kwargs": {"instance_uuids": uuids, "request_id": "req-1"},
        "options": {"task_id": task_id},
    }
    return in_flight.message_of_signature(signature)


@pytest.mark.parametrize("count", [1, 3])
def test_a_steps_start_replaces_the_records_of_its_instances_in_one_update(
    url: str, count: int
) -> None:
    """One instance (matched with ``=``) or several (an expanding ``IN``): one UPDATE,
    and another instance's record left as it was."""
    uuids = [f"{UUID[:-2]}{n:02d}" for n in range(count)]
    other = f"{UUID[:-2]}99"
    with session_scope(url) as session:
        in_flight.record(session, _boot_message("task-1", uuids), created=True)
        in_flight.record(session, _boot_message("task-other", [other]), created=True)
    with _statements(url) as statements, session_scope(url) as session:
        in_flight.record(session, _boot_message("task-2", uuids), replacing=True)
    assert statements == ["UPDATE"]
    with session_scope(url) as session:
        rows = {r.instance_uuid: r.task_id for r in session.scalars(select(OperationInFlight))}
    assert rows == {**dict.fromkeys(uuids, "task-2"), other: "task-other"}


def _step_start(url: str, uuid: str, task_id: str) -> None:
    """A step's start (``compute.deliveries.write_start``): its message replaces the record."""
    with session_scope(url) as session:
        in_flight.record(session, _boot_message(task_id, [uuid]), replacing=True)


def _records(url: str) -> dict[str, tuple[str | None, str | None]]:
    with session_scope(url) as session:
        rows = session.scalars(select(OperationInFlight))
        return {r.instance_uuid: (r.task_id, r.task_state) for r in rows}


def test_a_step_that_finds_no_record_writes_one_while_its_instance_has_a_task(url: str) -> None:
    uuid = make_instance(url, host="host1", node="host1", task_state="resize_migrating")
    _step_start(url, uuid, "task-1")
    assert _records(url) == {uuid: ("task-1", "resize_migrating")}


def test_a_late_copy_of_a_step_whose_operation_ended_brings_no_record_back(url: str) -> None:
    """The reaper undid the move while the source host was down (instance ERROR, no task,
    the record dropped); the message the dead worker held comes back when the host does.
    Its start must not write a record with no task_state: the reaper could never judge it
    stale, and would send a step with nothing left to do again and again."""
    uuid = make_instance(url, host="host1", node="host1", vm_state="error", task_state=None)
    _step_start(url, uuid, "task-late")
    assert _records(url) == {}
