"""What the Redis server says it was asked, for ``bench/boot_bench.py``: connections
accepted (``INFO stats`` ``total_connections_received``) and HELLO and PING calls
(``INFO commandstats``). Server-wide counters: on a Redis that others use too (``--redis-url``
of the shared server), their traffic counts as well; the embedded broker has none."""

from __future__ import annotations

from dataclasses import dataclass

import redis


@dataclass(frozen=True, slots=True)
class BrokerCounts:
    connections: int
    hello: int
    ping: int

    def __sub__(self, other: BrokerCounts) -> BrokerCounts:
        return BrokerCounts(
            self.connections - other.connections, self.hello - other.hello, self.ping - other.ping
        )


def read_counts(client: redis.Redis) -> BrokerCounts:
    stats = client.info("stats")
    commands = client.info("commandstats")
    return BrokerCounts(
        connections=int(stats["total_connections_received"]),
        hello=int(commands.get("cmdstat_hello", {}).get("calls", 0)),
        ping=int(commands.get("cmdstat_ping", {}).get("calls", 0)),
    )


def with_db(url: str, db: int) -> str:
    """``url`` (a ``redis://`` URL) with database ``db``."""
    base, _, last = url.rstrip("/").rpartition("/")
    return f"{base}/{db}" if last.isdigit() else f"{url.rstrip('/')}/{db}"
