"""novaq's Redis transport (``novaq.redis_transport``) on kombu's real Redis channel code,
its Redis a fakeredis server: a message delivered to a channel whose transport Celery
detached after a lost connection stays in the unacked index, and its late ack still
reaches Redis. The real broker restart is ``tests/integration/test_broker_restart.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from kombu import Connection, Exchange, Producer, Queue
from kombu.transport import redis as kombu_redis

from novaq import redis_transport
from novaq.redis_transport import transport_for

QUEUE = Queue("compute.h1", Exchange("compute.h1", "direct"), "compute.h1")


def on_fakeredis(base: Any) -> type:
    """``base``'s transport whose channels talk to one fakeredis server."""

    class Channel(base.Channel):  # type: ignore[misc, name-defined]
        connection_class = fakeredis.FakeRedisConnection

    return type("Transport", (base.Transport,), {"Channel": Channel})


@pytest.fixture
def server() -> Iterator[fakeredis.FakeRedis]:
    client = fakeredis.FakeRedis(host="127.0.0.1", port=1)  # the server of 127.0.0.1:1
    client.flushall()
    yield client
    client.flushall()


def deliver(transport: type) -> tuple[Connection, Any, Any]:
    """A connection, its channel, and one message delivered to it, not acked."""
    conn = Connection("redis://127.0.0.1:1/0", transport=transport)
    channel = conn.default_channel
    producer = Producer(channel)
    producer.publish({"step": 1}, exchange=QUEUE.exchange, routing_key=QUEUE.name, declare=[QUEUE])
    message = QUEUE(channel).get(no_ack=False)
    assert message is not None
    return conn, channel, message


def lose_connection(conn: Connection) -> None:
    # What Celery's Consumer.on_connection_error_after_connected leaves behind:
    # Connection.collect() detaches the transport (transport.client = None) while a
    # channel whose first close failed on the dead socket is still open.
    conn._do_close_transport()


def test_a_detached_channel_leaves_its_message_unacked_and_its_late_ack_still_lands(
    server: fakeredis.FakeRedis,
) -> None:
    conn, channel, message = deliver(on_fakeredis(redis_transport))
    assert server.hlen("unacked") == 1
    lose_connection(conn)
    channel.close()  # no AttributeError: nothing requeued behind the running step's back
    assert (server.hlen("unacked"), server.llen("compute.h1")) == (1, 0)
    message.ack()  # the step ends once the broker is back: its ack removes the message
    assert (server.hlen("unacked"), server.zcard("unacked_index")) == (0, 0)


def test_an_attached_channel_still_requeues_at_close_as_kombu_does(
    server: fakeredis.FakeRedis,
) -> None:
    """A warm shutdown gives back what was reserved and not started."""
    _, channel, _ = deliver(on_fakeredis(redis_transport))
    channel.close()
    assert (server.hlen("unacked"), server.llen("compute.h1")) == (0, 1)


def test_stock_kombu_still_fails_there_so_the_workaround_is_still_needed(
    server: fakeredis.FakeRedis,
) -> None:
    """When this fails, kombu fixed the bug: drop ``novaq.redis_transport``."""
    conn, channel, message = deliver(on_fakeredis(kombu_redis))
    lose_connection(conn)
    with pytest.raises(AttributeError, match="hostname"):
        channel.close()
    with pytest.raises(AttributeError):
        message.ack()


@pytest.mark.parametrize(
    ("url", "transport"),
    [
        ("redis://127.0.0.1:6379/0", "novaq.redis_transport:Transport"),
        ("rediss://broker:6380/0", "novaq.redis_transport:Transport"),
        ("memory://", None),
        ("amqp://guest@127.0.0.1//", None),
    ],
)
def test_the_workaround_transport_serves_redis_urls_only(url: str, transport: str | None) -> None:
    assert transport_for(url) == transport


def test_a_channel_makes_one_client_per_pool_and_still_delivers(
    server: fakeredis.FakeRedis,
) -> None:
    """Publishes, gets and acks share the channel's one synchronous client; a channel
    whose pool is made again (after a close of its clients) gets a new one."""
    conn, channel, message = deliver(on_fakeredis(redis_transport))
    try:
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            assert first.connection_pool is channel.pool
        message.ack()
        producer = Producer(channel)
        for n in range(3):
            producer.publish({"step": n}, exchange=QUEUE.exchange, routing_key=QUEUE.name)
        got = [QUEUE(channel).get(no_ack=True) for _ in range(3)]
        assert [m.payload["step"] for m in got if m is not None] == [0, 1, 2]
        channel._pool = None  # as kombu's Channel._disconnect_pools leaves it (a close, a fork)
        with channel.conn_or_acquire() as again:
            assert again is not first and again.connection_pool is channel.pool
        own = server  # a caller's own client is used as it is
        with channel.conn_or_acquire(own) as given:
            assert given is own
    finally:
        conn.release()
