"""Real ``celery worker`` processes for tests and benchmarks (no side effects on import)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from kombu.exceptions import OperationalError as KombuOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError

ROOT = Path(__file__).resolve().parents[2]
_BROKER_ERRORS = (OSError, RedisConnectionError, KombuOperationalError)


def _die_with_parent() -> None:
    """Linux: the worker gets SIGKILL when the test process dies, so no stray worker of
    an interrupted run consumes the next run's queues with the wrong database."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class WorkersNotReady(RuntimeError):
    pass


@dataclass
class Worker:
    """A child process (a celery worker, ``novaq up``, a broker) in a session of its own,
    its output in ``log``; it dies with the test process."""

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
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        handle.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 20) -> None:
        if self.proc is None or not self.alive():
            return
        os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


@dataclass
class Cluster:
    state_dir: Path
    workers: dict[str, Worker] = field(default_factory=dict)
    #: Environment every worker of the cluster gets (e.g. another broker's URL).
    env: dict[str, str] = field(default_factory=dict)

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
        env = dict(os.environ, NOVAQ_HOST=host, PYTHONPATH=str(ROOT))
        env.update(self.env, **(extra_env or {}))
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
            try:
                replies = app.control.ping(timeout=1) or []
            except _BROKER_ERRORS:  # a broker just restarted: the pooled connection died
                replies = []
                time.sleep(0.2)
            seen = {name for reply in replies for name in reply}
            if nodes <= seen:
                return
            for worker in self.workers.values():
                if worker.proc is not None and worker.proc.poll() is not None:
                    _fail(f"worker {worker.name} exited:\n{worker.tail()}")
        _fail(f"workers not ready: {sorted(nodes - seen)}")

    def retire(self, host: str, reason: str) -> None:
        """Stop ``host``'s worker (if it still runs) and disable its service, so no later
        test's boot is scheduled onto a stopped host in the ``service_down_time`` before it
        counts as down (under pytest-xdist the next module can start at once)."""
        from workflows import api

        worker = self.workers.pop(host, None)
        if worker is not None:
            worker.stop()
        with contextlib.suppress(Exception):  # a teardown: the database may be the fault
            api.disable_service(host, reason)

    def stop(self) -> None:
        for worker in self.workers.values():
            worker.stop()


def start_cluster(
    state_dir: Path,
    hosts: list[str],
    extra_env: dict[str, dict[str, str]] | None = None,
    scheduler_node: str = "scheduler@it",
    env: dict[str, str] | None = None,
) -> Cluster:
    """A scheduler and one compute worker per host; ``env`` goes to every worker."""
    cluster = Cluster(state_dir, env=dict(env or {}))
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


def _fail(message: str) -> None:
    raise WorkersNotReady(message)
