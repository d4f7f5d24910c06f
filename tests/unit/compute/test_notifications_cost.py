"""What a notification costs (issue 16): its payload is one SELECT in a read-only
transaction (no commit), and it goes out through the Celery app's pooled producer: no new
broker connection per message, the exchange declared once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Queue
from kombu.connection import Connection

from compute import notifications
from compute.instance_actions import add_fault
from compute.sessions import sessions_for
from models.db import session_scope
from novaq.celery_app import app
from tests.costs import Sql, count_broker_connections, counting_sql
from tests.factories import make_instance

QUEUE = Queue(
    "novaq-test-notifications",
    exchange=notifications.EXCHANGE,
    routing_key=f"{notifications.TOPIC}.*",
)


@pytest.fixture
def received() -> Iterator[Any]:
    """A queue bound to the notifications exchange, emptied after."""
    with app.connection_for_write() as conn:
        bound = QUEUE(conn.default_channel)
        bound.declare()
        bound.purge()
        yield lambda: _drain(conn)
        bound.purge()


def _drain(conn: Connection) -> list[dict[str, Any]]:
    simple = conn.SimpleQueue(QUEUE)
    messages = []
    while simple.qsize():
        message = simple.get(block=False)
        messages.append(message.payload)
        message.ack()
    return messages


@pytest.fixture
def publisher() -> Iterator[None]:
    notifications.install(notifications.kombu_publisher(lambda: app.producer_pool))
    yield
    notifications.install(None)


@pytest.fixture
def established(monkeypatch: pytest.MonkeyPatch) -> list[Connection]:
    return count_broker_connections(monkeypatch)


@pytest.fixture
def sql(db_url: str) -> Iterator[Sql]:
    with counting_sql(db_url) as seen:
        yield seen


def test_two_notifications_open_no_new_broker_connection_and_commit_nothing(
    db_url: str, publisher: None, received: Any, established: list[Connection], sql: Sql
) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    sessions = sessions_for(db_url)
    notifications.emit(sessions, "instance.pause.start", uuid, "host1", "req-1")
    established.clear()
    sql.reset()
    notifications.emit(sessions, "instance.pause.end", uuid, "host1", "req-1")
    notifications.emit(sessions, "instance.reboot.start", uuid, "host1", "req-2")
    assert established == []
    assert sql.commits == 0
    # Per notification: the reader's BEGIN (its connection is query_only for life), then
    # one SELECT.
    assert [s.split()[0] for s in sql.statements] == ["BEGIN", "SELECT"] * 2
    events = [m["event_type"] for m in received()]
    assert events == ["instance.pause.start", "instance.pause.end", "instance.reboot.start"]


def test_the_one_statement_payload_carries_the_latest_fault(
    db_url: str, publisher: None, received: Any
) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    with session_scope(db_url) as session:
        add_fault(session, uuid, RuntimeError("first"), "host1")
        add_fault(session, uuid, RuntimeError("the latest"), "host1")
    notifications.emit(
        sessions_for(db_url), "instance.create.error", uuid, "host1", priority="ERROR"
    )
    [message] = received()
    data = message["payload"]["nova_object.data"]
    assert data["uuid"] == uuid and data["flavor"]["nova_object.name"] == "FlavorPayload"
    assert data["fault"]["nova_object.data"]["exception_message"] == "the latest"
    # The same payload as the one the other readers build (``instance_payload``).
    with session_scope(db_url, read_only=True) as session:
        from compute.instance_state import get_instance

        again = notifications.instance_payload(session, get_instance(session, uuid), None)
    assert again["nova_object.data"]["fault"] == data["fault"]
