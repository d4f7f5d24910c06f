"""kombu's Redis transport with one workaround: a worker survives the loss of its broker
connection while a late-acked step is running (issue 14, item 2).

Named in ``celeryconfig.broker_transport`` (``novaq.redis_transport:Transport``); the URL
stays ``redis://``. Tested with kombu 5.7.0 and celery 5.7.0 (``pyproject.toml`` pins
both to 5.7.x); ``tests/unit/test_redis_transport.py`` fails if kombu changes what this
relies on.

The failure, on celery 5.7.0 + kombu 5.7.0 (``tests/integration/test_broker_restart.py``
reproduces it every time without this module): the broker dies while a compute step
runs. Celery's ``Consumer.on_connection_error_after_connected`` first calls
``connection.collect()``, which closes the channels and then *detaches* the transport
(``transport.client = None``); the first close of the consuming channel fails early on
the dead socket (``_brpop_read``), so the channel is left open. It then calls
``connection.close()`` (added by celery PR #10242, GH-9705), which closes that channel
again: ``Channel.close`` drops its connection pools, and ``QoS.restore_unacked_once``
tries to requeue the running step's message, which needs a new pool, whose parameters
come from ``transport.client``, now None:
``AttributeError: 'NoneType' object has no attribute 'hostname'`` (``_connparams``). An
AttributeError is not a connection error, so it escapes Celery's ``ignore_errors`` and
the worker exits ("Unrecoverable error"). The same path failed at warm shutdown in
celery/kombu#970 and on a gossip restart in celery/kombu#582; kombu's main branch still
has it (``Channel._connparams`` reads ``self.connection.client``).

The workaround, on a channel whose transport is detached (a broken connection torn
down by Celery):

- no requeue at close (``QoS.restore_unacked``): the broker is usually gone at that
  moment, and a requeue from a detached channel can drop a message (kombu removes it
  from the unacked index before looking up its queue, which needs the detached
  transport's state). The message stays in Redis's unacked index, as for a SIGKILLed
  worker, and comes back after the visibility timeout, unless the step acks it first;
- the step's late ack still reaches Redis (``Channel._get_pool``): the channel keeps its
  last synchronous pool (disconnected; it reconnects on demand), so a step that ends
  after the broker is back removes its message from the unacked index (ack emulation
  is global to the Redis database, not per channel) and is not delivered again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

LOG = logging.getLogger(__name__)


def is_detached(channel: Any) -> bool:
    """Whether the channel's transport was torn down (closed, or detached from its
    kombu ``Connection`` by ``Connection.collect``)."""
    transport = channel.connection
    return transport is None or transport.client is None


class QoS(kombu_redis.QoS):  # type: ignore[misc]
    def restore_unacked(self, client: Any = None) -> None:
        if client is None and is_detached(self.channel):
            delivered: Any = self._delivered
            if delivered:
                # NOTE: left in the unacked index, not lost: the sweep requeues them
                # after the visibility timeout, or the running step acks its own.
                LOG.warning(
                    "Broker connection lost: %d unacknowledged message(s) left to the "
                    "visibility timeout",
                    len(delivered),
                )
            delivered.clear()
            return
        super().restore_unacked(client)


class Channel(kombu_redis.Channel):  # type: ignore[misc]
    QoS = QoS
    #: The last synchronous pool (acks, requeues), kept for use once detached.
    _last_pool: redis.ConnectionPool | None = None
    #: The client of the synchronous pool, made once per pool (``conn_or_acquire``).
    _sync_client: redis.Redis | None = None

    @contextlib.contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """kombu's, with the client of the channel's synchronous pool made once.

        NOTE: kombu makes a new ``redis.Redis`` at every call (every publish, ack and
        queue lookup): about a tenth of a millisecond, 7 % of ``api.boot``. A client holds
        no connection of its own (each command checks one out of the pool, and is
        thread-safe so), so one per pool serves; a new pool (the channel's first, or one
        made again after a close) gets a new client."""
        if client:
            yield client
            return
        pool = self.pool
        cached = self._sync_client
        if cached is None or cached.connection_pool is not pool:
            cached = self._sync_client = self._create_client()
        yield cached

    def _get_pool(self, asynchronous: bool = False) -> redis.ConnectionPool:
        if not asynchronous and self._last_pool is not None and is_detached(self):
            return self._last_pool
        pool = super()._get_pool(asynchronous=asynchronous)
        if not asynchronous:
            self._last_pool = pool
        return pool


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel


def transport_for(broker_url: str) -> str | None:
    """``celeryconfig.broker_transport`` for ``broker_url``: this transport for a Redis
    URL, None (kombu's transport for the URL's scheme) for any other."""
    if broker_url.partition("://")[0] in ("redis", "rediss"):
        return f"{__name__}:Transport"
    return None


__all__ = ["Channel", "QoS", "Transport", "is_detached", "transport_for"]
