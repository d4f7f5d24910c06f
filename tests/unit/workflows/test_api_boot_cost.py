"""What one ``api.boot`` costs (issue 16): one write transaction (the servers, their
actions and the operation's durable record commit together) plus a read-only lookup, and
no new broker connection once the API's pooled one is open; one ``api.delete``: one write
transaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from kombu.connection import Connection
from sqlalchemy import func, select

from models import Instance, InstanceAction, OperationInFlight, Service, utcnow
from models.db import session_scope
from tests.costs import Sql, count_broker_connections, counting_sql
from tests.factories import set_last_seen_up
from tests.unit.workflows.servers import clear_queues, placed_server, queued
from workflows import api


@pytest.fixture
def counts(db_url: str) -> Iterator[Sql]:
    with counting_sql(db_url) as seen:
        yield seen
    clear_queues("scheduler")


@pytest.fixture
def broker_connections(monkeypatch: pytest.MonkeyPatch) -> list[Connection]:
    return count_broker_connections(monkeypatch)


def _count(db_url: str, model: Any) -> int:
    with session_scope(db_url) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def test_a_boot_is_one_commit_and_a_read_only_lookup(db_url: str, counts: Sql) -> None:
    api.create_flavor("m1", 1, 512, 1)
    api.boot("warm", "m1", "cirros")
    counts.reset()
    [uuid] = api.boot("vm", "m1", "cirros")
    assert (counts.commits, counts.rollbacks) == (1, 1)
    # 7 statements: the lookup's flavor and image (on a reader's connection, query_only
    # for life), then one INSERT a table (the record in flight is a plain INSERT: its
    # instance is new, so no savepoint, no UPDATE).
    assert counts.statements == [
        "BEGIN",
        "SELECT FLAVORS.ID,",
        "SELECT IMAGES.ID,",
        "BEGIN IMMEDIATE",
        "INSERT INTO",
        "INSERT INTO",
        "INSERT INTO",
    ]
    # What that one commit wrote: the server, its action and its record in flight.
    with session_scope(db_url) as session:
        record = session.get(OperationInFlight, uuid)
        assert record is not None and record.task_state == "scheduling"
        assert record.message["signature"]["task"] == "scheduler.select_destinations"
    assert (_count(db_url, Instance), _count(db_url, InstanceAction)) == (2, 2)
    assert queued("scheduler") == 2


def test_a_multi_create_is_still_one_commit(db_url: str, counts: Sql) -> None:
    api.create_flavor("m1", 1, 512, 1)
    api.boot("warm", "m1", "cirros")
    counts.reset()
    uuids = api.boot("web", "m1", "cirros", count=3)
    assert counts.commits == 1
    # The ORM's INSERT a server and an action each (3 + 3), and one INSERT (an
    # executemany) for the three records in flight.
    assert counts.statements.count("INSERT INTO") == 7
    assert not [s for s in counts.statements if s.startswith(("SAVEPOINT", "UPDATE"))]
    with session_scope(db_url) as session:
        records = session.scalars(
            select(OperationInFlight.instance_uuid).where(
                OperationInFlight.instance_uuid.in_(uuids)
            )
        )
        assert sorted(records) == sorted(uuids)


def test_a_second_boot_opens_no_broker_connection(
    db_url: str, counts: Sql, broker_connections: list[Connection]
) -> None:
    api.create_flavor("m1", 1, 512, 1)
    api.boot("first", "m1", "cirros")  # the pool connects once (if it had not yet)
    broker_connections.clear()
    api.boot("second", "m1", "cirros")
    api.boot("third", "m1", "cirros")
    assert broker_connections == []
    assert queued("scheduler") == 3


def test_a_delete_is_one_write_transaction_of_four_statements(db_url: str, counts: Sql) -> None:
    uuid = placed_server(db_url)
    counts.reset()
    api.delete(uuid)
    # The instance with its host's service read, the action, the task state and the
    # record written, in one transaction (was a read-only lookup, then a transaction that
    # read the instance again: 2 transactions, 9 statements; then the record's INSERT in
    # a savepoint: 7 statements; then an INSERT ... ON CONFLICT DO UPDATE: 5; now the
    # service in the instance's SELECT).
    assert (counts.commits, counts.rollbacks) == (1, 0)
    assert [s for s in counts.statements if not s.startswith("BEGIN")] == [
        "SELECT INSTANCES.ID,",
        "INSERT INTO",
        "UPDATE INSTANCES",
        "INSERT INTO",
    ]
    # What that one commit wrote: the task state and its record in flight.
    with session_scope(db_url) as session:
        record = session.get(OperationInFlight, uuid)
        assert record is not None and record.task_state == "deleting"
        assert record.message["signature"]["task"] == "compute.terminate_instance"
        state = session.scalar(select(Instance.task_state).where(Instance.uuid == uuid))
        assert state == "deleting"
    assert queued("compute.host1") == 1
    clear_queues("compute.host1")


@pytest.mark.parametrize("down", ["forced_down", "silent", "no_service"])
def test_a_delete_on_a_host_that_is_not_up_is_local(db_url: str, down: str) -> None:
    """The host's service read with the instance decides as ``host_is_up`` did: forced
    down, not heard from in ``service_down_time``, or missing: Nova's local delete, no
    message to the host."""
    uuid = placed_server(db_url)
    with session_scope(db_url) as session:
        service = session.scalars(select(Service).where(Service.host == "host1")).one()
        if down == "forced_down":
            service.forced_down = True
        elif down == "no_service":
            service.deleted = service.id
    if down == "silent":
        set_last_seen_up(db_url, utcnow() - dt.timedelta(hours=1), "host1")
    api.delete(uuid)
    with session_scope(db_url) as session:
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert (instance.vm_state, instance.task_state, instance.deleted) == (
            "deleted",
            None,
            instance.id,
        )
    assert queued("compute.host1") == 0
