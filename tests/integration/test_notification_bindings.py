"""The notifications publisher leaves out only what no queue would get (issue 16): on
Redis it watches the exchange's bindings on a tracked connection instead of reading them
at each publish (``compute.notification_bindings``), and a queue bound since still gets
what is published after its binding, with no delay."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue

from compute import notifications
from compute.notification_bindings import BindingWatch, watch_for
from novaq.celery_app import app

pytestmark = pytest.mark.integration


@pytest.fixture
def connection() -> Iterator[Connection]:
    with Connection(os.environ["NOVAQ_BROKER_URL"]) as conn:
        yield conn


@pytest.fixture
def watch(connection: Connection) -> Iterator[tuple[BindingWatch, Exchange]]:
    exchange = Exchange(f"novaq-test-watch-{os.getpid()}", type="topic", durable=False)
    watched = watch_for(connection.default_channel, exchange.name)
    assert watched is not None
    yield watched, exchange
    watched.close()


def test_a_binding_and_its_removal_are_seen_at_the_next_question(
    connection: Connection, watch: tuple[BindingWatch, Exchange]
) -> None:
    watched, exchange = watch
    assert watched.routes("versioned_notifications.info") is False
    queue = Queue("novaq-test-watched", exchange=exchange, routing_key="versioned_notifications.*")
    bound = queue(connection.default_channel)
    bound.declare()
    try:
        # No wait: Redis pushed the invalidation before it answered the binding.
        assert watched.routes("versioned_notifications.info") is True
        assert watched.routes("versioned_notifications.error") is True
        assert watched.routes("other.info") is False
    finally:
        bound.delete()
    assert watched.routes("versioned_notifications.info") is False


def test_a_queue_bound_after_the_publisher_saw_none_gets_the_next_notification(
    connection: Connection,
) -> None:
    publish = notifications.kombu_publisher(lambda: app.producer_pool)
    # A key no other test binds: the first publish finds no queue and is left out.
    publish({"event_type": "first"}, "SAMPLE")
    queue = Queue(
        f"novaq-test-late-{os.getpid()}",
        exchange=notifications.EXCHANGE,
        routing_key=f"{notifications.TOPIC}.sample",
        durable=False,
    )
    bound = queue(connection.default_channel)
    bound.declare()
    try:
        publish({"event_type": "second"}, "SAMPLE")
        got: list[Any] = []
        while (message := bound.get(no_ack=True)) is not None:
            got.append(message.payload["event_type"])
        assert got == ["second"]
    finally:
        bound.delete()


def test_no_watch_for_another_transport() -> None:
    with Connection("memory://") as conn:
        assert watch_for(conn.default_channel, "notifications") is None


def test_a_forked_child_reads_the_bindings_on_a_connection_of_its_own(
    watch: tuple[BindingWatch, Exchange],
) -> None:
    watched, _exchange = watch
    assert watched.routes("versioned_notifications.info") is False
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        code = 2
        try:
            code = 0 if watched.routes("versioned_notifications.info") is False else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # The parent's tracked connection is its own still: nothing pending, no new read.
    conn = watched._conn
    assert watched.routes("versioned_notifications.info") is False
    assert watched._conn is conn
