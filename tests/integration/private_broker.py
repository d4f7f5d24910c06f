"""A broker of a test's own: a ``redis-server`` on a free loopback port that the test may
SIGKILL and restart (on its data or fresh), and the switch that makes this process's
Celery app publish and read results through it.

The shared Redis on 6379 is never touched: a test that kills a broker kills only this one.
Persistence as a careful deployment has it: AOF with ``appendfsync always`` (every write
is on disk before Redis answers), no RDB snapshots, ``noeviction`` (CELERY_RELIABILITY.md
§1.1: eviction can delete kombu's bindings).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.integration.workers import Worker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PrivateRedis:
    """One ``redis-server`` whose data lives in ``data_dir``; same port across restarts,
    so the workers reconnect to it as to a restarted production broker."""

    data_dir: Path
    port: int = field(default_factory=free_port)
    process: Worker | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def start(self, timeout_s: float = 10) -> PrivateRedis:
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
        while True:
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                pass
            if not self.process.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{self.process.tail()}")
            time.sleep(0.05)

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
