"""Whether a notification would reach any queue, known without asking Redis at each
publish (issue 16).

kombu's Redis transport routes a message on a topic exchange by reading the exchange's
bindings (``SMEMBERS _kombu.binding.notifications``) at every publish, then pushes it to
each queue whose pattern matches its routing key. With no queue bound (nothing listens:
the usual case, and the benchmark's), the message goes nowhere after a full publish: a
producer from the pool, the JSON and base64 of the body, that round trip.

A :class:`BindingWatch` holds the bindings as Redis last reported them, read on a
connection of its own with client-side tracking (``CLIENT TRACKING ON`` over RESP3,
Redis >= 6.0): when the set changes (a queue bound, unbound or deleted), Redis pushes an
invalidation on that connection while it applies the change, and writes it out before it
serves any command that follows. Before each answer the watch polls its socket (a
``poll``, no round trip); anything there (an invalidation, a closed connection) and the
bindings are read again over a new connection.

The guarantee: a notification is left out only when the bindings as Redis last pushed
them route its key to no queue, that is when kombu's own publish would deliver it
nowhere. A queue whose binding Redis applied before a publish began gets the message,
as with kombu's lookup at each publish; while some queue matches, the message goes
through kombu's publish as before (its routing, its lookup). Whatever goes wrong with
the watch (the broker away, a Redis without client tracking, an unexpected answer), it
answers "unknown" and the message is published as before, without trying again for
``RETRY_S``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual.exchange import TopicExchange

LOG = logging.getLogger(__name__)

#: Bounds on the watch's own connection (kombu's default has none): a broker that stops
#: answering costs a publish at most this long before it goes through kombu as before.
TIMEOUT_S = 2.0
#: After the watch failed, how long every message goes through kombu before it tries again.
RETRY_S = 5.0


class BindingWatch:
    """The bindings of one topic exchange on one Redis database, as Redis last pushed
    them (see the module's docstring). Thread-safe; a forked child reads them again on
    a connection of its own."""

    def __init__(self, params: dict[str, Any], exchange: str, key: str, sep: str) -> None:
        self._params = params
        self._exchange, self._key, self._sep = exchange, key, sep
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._conn: Any = None
        self._table: list[tuple[str, ...]] = []
        self._routes: dict[str, bool] = {}
        self._retry_at = 0.0
        # kombu's own matching of a routing key against a binding's pattern.
        self._topic = TopicExchange(None)  # type: ignore[no-untyped-call]
        _WATCHES.add(self)

    def _after_fork_in_child(self) -> None:
        # Another thread of the parent may have held the lock; the connection is the
        # parent's (read again at the next question: the pid differs).
        self._lock = threading.Lock()

    def routes(self, routing_key: str) -> bool | None:
        """Whether some queue is bound for ``routing_key``; None when unknown."""
        with self._lock:
            if self._retry_at and time.monotonic() < self._retry_at:
                return None
            try:
                if self._pid != os.getpid() or self._conn is None or self._conn.can_read(0):
                    self._read()
            except Exception as exc:  # noqa: BLE001 - unknown: kombu publishes as before
                # NOTE: not again before RETRY_S (a broker away, a Redis without client
                # tracking or that refuses it): no connection attempt per publish.
                LOG.debug("Bindings of %s unknown: %s", self._exchange, exc)
                self._drop()
                self._retry_at = time.monotonic() + RETRY_S
                return None
            self._retry_at = 0.0
            known = self._routes.get(routing_key)
            if known is None:
                queues = self._topic.lookup(  # type: ignore[no-untyped-call]
                    self._table, self._exchange, routing_key, None
                )
                known = self._routes[routing_key] = any(queues)
            return known

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        self._routes.clear()
        if conn is not None:
            conn.disconnect()  # in a forked child, redis-py only closes its copy

    def _read(self) -> None:
        """The bindings, over a new connection that tracks them."""
        self._drop()
        self._pid = os.getpid()
        conn = _connection(self._params)
        self._conn = conn
        conn.connect()
        conn.send_command("CLIENT", "TRACKING", "ON")
        answer = conn.read_response()
        if answer not in (b"OK", "OK"):
            raise redis.ResponseError(f"CLIENT TRACKING ON answered {answer!r}")
        conn.send_command("SMEMBERS", self._key)
        members = conn.read_response()
        self._table = [
            tuple((m.decode() if isinstance(m, bytes) else m).split(self._sep)) for m in members
        ]


_WATCHES: weakref.WeakSet[BindingWatch] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for watch in list(_WATCHES):
        watch._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _connection(params: dict[str, Any]) -> Any:
    params = dict(params)
    params.pop("max_connections", None)
    connection_class = params.pop("connection_class", redis.Connection)
    for timeout in ("socket_timeout", "socket_connect_timeout"):
        if params.get(timeout) is None:
            params[timeout] = TIMEOUT_S
    # Nothing but this watch's own commands on it (a health check would send a PING).
    params["health_check_interval"] = 0
    return connection_class(**params, protocol=3)


def watch_for(channel: Any, exchange: str) -> BindingWatch | None:
    """A watch of ``exchange``'s bindings for a kombu channel of the Redis transport;
    None for another transport (or Sentinel's), where nothing changes."""
    if not isinstance(channel, kombu_redis.Channel) or isinstance(
        channel, kombu_redis.SentinelChannel
    ):
        return None
    # The key as kombu's (prefixed) client names it.
    key = getattr(channel, "global_keyprefix", "") + channel.keyprefix_queue % exchange
    params = channel._connparams()  # type: ignore[no-untyped-call]
    return BindingWatch(params, exchange, key, channel.sep)


__all__ = ["BindingWatch", "watch_for"]
