"""Integration tier: real Redis, real PostgreSQL, real ``celery worker`` processes.

Uses Redis database 13 and a PostgreSQL database of its own (``novaq_it_<pid>``), both
cleaned up at the end. A missing server skips the tier locally and fails it in CI.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REDIS_DB = 13
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
PG_DB = f"novaq_it_{os.getpid()}"
ROOT = Path(__file__).resolve().parents[2]
_STATE = Path(tempfile.mkdtemp(prefix="novaq-it-"))

for _name in [n for n in os.environ if n.startswith("NOVAQ_")]:
    del os.environ[_name]
os.environ.update(
    NOVAQ_STATE_DIR=str(_STATE),
    NOVAQ_BROKER_URL=f"redis://127.0.0.1:6379/{REDIS_DB}",
    NOVAQ_DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{PG_DB}",
    NOVAQ_HOST="it-client",
    NOVAQ_REPORT_INTERVAL="1",
    NOVAQ_SERVICE_DOWN_TIME="6",
)


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _require_services() -> None:
    missing = [
        name for name, port in (("Redis", 6379), ("PostgreSQL", 5432)) if not _reachable(port)
    ]
    if missing:
        message = f"integration tier needs {', '.join(missing)} on loopback"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def services() -> Iterator[str]:
    """A fresh PostgreSQL database with the schema, and an empty Redis database."""
    _require_services()
    import redis
    from sqlalchemy import create_engine, text

    from models.migrate import upgrade

    admin = create_engine(
        PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{PG_DB}"'))
        conn.execute(text(f'CREATE DATABASE "{PG_DB}"'))
    client = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    client.flushdb()
    url = os.environ["NOVAQ_DATABASE_URL"]
    upgrade(url)
    yield url
    from models.db import dispose_all

    dispose_all()
    client.flushdb()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)'))
    admin.dispose()


@dataclass
class Worker:
    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Worker:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            env=self.env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )
        handle.close()
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


@dataclass
class Cluster:
    state_dir: Path
    workers: dict[str, Worker] = field(default_factory=dict)

    def add(
        self,
        name: str,
        queues: str,
        node: str,
        host: str,
        pool: str = "threads",
        concurrency: int = 4,
        extra_env: dict[str, str] | None = None,
    ) -> Worker:
        env = dict(os.environ, NOVAQ_HOST=host, PYTHONPATH=str(ROOT), **(extra_env or {}))
        argv = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tasks",
            "worker",
            "-Q",
            queues,
            "-n",
            node,
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "-E",
            "-l",
            "INFO",
            "--without-mingle",
            "--without-gossip",
        ]
        worker = Worker(name, argv, env, self.state_dir / f"{name}.log").start()
        self.workers[name] = worker
        return worker

    def wait_ready(self, nodes: set[str], timeout_s: float = 60) -> None:
        from tasks import app

        deadline = time.monotonic() + timeout_s
        seen: set[str] = set()
        while time.monotonic() < deadline:
            replies = app.control.ping(timeout=1) or []
            seen = {name for reply in replies for name in reply}
            if nodes <= seen:
                return
            for worker in self.workers.values():
                if worker.proc is not None and worker.proc.poll() is not None:
                    pytest.fail(f"worker {worker.name} exited:\n{worker.tail()}")
        pytest.fail(f"workers not ready: {sorted(nodes - seen)}")

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()


def start_cluster(
    state_dir: Path,
    hosts: list[str],
    extra_env: dict[str, dict[str, str]] | None = None,
    scheduler_node: str = "scheduler@it",
) -> Cluster:
    cluster = Cluster(state_dir)
    cluster.add(
        "scheduler",
        "scheduler,maintenance",
        scheduler_node,
        "it-scheduler",
        pool="prefork",
        concurrency=2,
    )
    for host in hosts:
        cluster.add(
            host, f"compute.{host}", f"compute@{host}", host, extra_env=(extra_env or {}).get(host)
        )
    cluster.wait_ready({scheduler_node, *(f"compute@{h}" for h in hosts)})
    return cluster


@pytest.fixture(scope="session")
def two_hosts(services: str) -> Iterator[Cluster]:
    """A scheduler and compute workers for host1 and host2 (libvirt test:///)."""
    cluster = start_cluster(_STATE, ["host1", "host2"])
    yield cluster
    cluster.stop()


@pytest.fixture
def state_dir() -> Path:
    return _STATE
