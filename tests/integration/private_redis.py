"""A broker of a test's or the soak's own: a ``redis-server`` on a loopback port that it may SIGKILL
and restart, on its data or empty. The shared Redis on 6379 is never touched.

Persistence as a careful deployment has it: AOF with ``appendfsync always`` (a write is
on disk before Redis answers), no RDB snapshots, ``noeviction`` (eviction could delete
kombu's bindings). The port stays the same across restarts, so the workers reconnect to
it as to a restarted production broker.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.integration.workers import Worker
from tests.tcp_proxy import free_port


class BrokerNotStarted(RuntimeError):
    pass


@dataclass
class PrivateRedis:
    data_dir: Path
    port: int = field(default_factory=free_port)
    process: Worker | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def start(self, timeout_s: float = 15) -> PrivateRedis:
        """Start it and wait (at most ``timeout_s``) until it answers PING, AOF loaded."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            "redis-server",
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.data_dir),
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "always",
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        log = self.data_dir.parent / f"redis-{self.port}.log"
        self.process = Worker("redis", argv, dict(os.environ), log).start()
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if not self.process.alive() or time.monotonic() > deadline:
                raise BrokerNotStarted(f"redis-server did not start:\n{self.process.tail()}")
            time.sleep(0.05)
        return self

    def _answers(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError, redis.BusyLoadingError):
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to the clients."""
        if self.process is not None:
            self.process.stop(signal.SIGKILL)

    def wipe(self) -> None:
        """Forget the data (a broker replaced by an empty one)."""
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def _point_app_at(broker_url: str, result_backend: str) -> None:
    from novaq.celery_app import app

    app.conf.broker_url = broker_url
    app.conf.result_backend = result_backend
    # What Celery caches per broker or backend (app._after_fork drops the same pools).
    # NOTE: dropped, not closed: kombu keeps one pool per broker in a registry of its own
    # and hands the same one back when the app returns to that broker.
    app._pool = None
    if "amqp" in app.__dict__:
        app.amqp._producer_pool = None
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)


@contextmanager
def publishing_through(broker_url: str) -> Iterator[None]:
    """This process's Celery app (the API's) uses ``broker_url`` as broker and result
    backend, then what it used before."""
    from novaq.celery_app import app

    saved = (app.conf.broker_url, app.conf.result_backend)
    _point_app_at(broker_url, broker_url)
    try:
        yield
    finally:
        _point_app_at(*saved)
