"""A broker of the soak's own: a ``redis-server`` on a loopback port that it may SIGKILL
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
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.integration.workers import Worker


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
