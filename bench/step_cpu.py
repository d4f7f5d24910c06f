"""The thread CPU of the boot's two worker steps (the scheduler's, the build) and of the
terminate (with ``api.delete``'s own, in the bench's thread), as a worker runs them: a
real Celery worker in a thread of this process (threads pool) on
Redis, SQLite or PostgreSQL (a database of its own, ``<--pg-prefix>_<pid>``, dropped at
the end), one boot at a time (a tool, not in ``make bench``).

    PYTHONPATH=<worktree> .venv/bin/python bench/step_cpu.py \\
        [--broker redis://127.0.0.1:6379/4] [--database sqlite|postgresql] [--boots 150] \\
        [--warmup 10] [--profile scheduler|build] [--out FILE.json]

What a step costs here is what ``boot_bench``'s table shows per step (each task's thread
CPU from ``task_prerun`` to ``task_postrun``: the delivery ledger, Celery's result and
events, the hand-over's publish included), without the cluster around it. Four hosts: host1
is the worker's simulated host (libvirt ``test:///``, instance files, qcow2 overlays),
hosts 2 to 4 are up with less memory, so every decision weighs four hosts and picks host1.
Every 20 boots the servers are deleted (not measured). ``--out``: the medians and minimums
as JSON, for A/B runs of two worktrees in interleaved processes (one process a side: a
change of a process-wide cache or connection state, e.g. SQLite's prepared statements,
cannot be alternated within one). ``--profile``: cProfile on the thread CPU clock of one
step, top functions printed.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

STEPS = {
    "scheduler": "scheduler.select_destinations",
    "build": "compute.build_and_run_instance",
    "terminate": "compute.terminate_instance",
}
#: ``api.delete``'s own thread CPU (the bench's thread, one call at a time).
API_DELETE = "api.delete"
#: Servers booted before they are deleted (room on host1, a short instances table).
BATCH = 20


def _configure(broker: str, state: Path, pg_name: str | None) -> str:
    for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
        del os.environ[name]
    if pg_name is None:
        url = f"sqlite:///{state}/steps.sqlite"
    else:
        from bench.pg_databases import pg_url

        url = pg_url(pg_name).replace("postgresql://", "postgresql+psycopg://", 1)
    os.environ.update(
        NOVAQ_STATE_DIR=str(state),
        NOVAQ_DATABASE_URL=url,
        NOVAQ_BROKER_URL=broker,
        NOVAQ_HOST="host1",
        # No periodic task queued at the worker's start: the steps alone.
        NOVAQ_PERIODIC_ENABLE="false",
    )
    return url


class StepClock:
    """Each measured task's thread CPU (ns) by task name; a cProfile of one step."""

    def __init__(self, profiled: str | None) -> None:
        self.on = False
        self.cpu: dict[str, list[int]] = defaultdict(list)
        self.profiled = profiled
        self.profiler = cProfile.Profile(time.thread_time_ns, 1e-9) if profiled else None
        self._local = threading.local()

    def started(self, sender: Any = None, **_: Any) -> None:
        profiling = self.on and self.profiler is not None and sender.name == self.profiled
        self._local.profiling = profiling
        if profiling:
            self.profiler.enable()  # type: ignore[union-attr]
        self._local.t0 = time.thread_time_ns()

    def ended(self, sender: Any = None, **_: Any) -> None:
        took = time.thread_time_ns() - self._local.t0
        if getattr(self._local, "profiling", False):
            self.profiler.disable()  # type: ignore[union-attr]
        if self.on:
            self.cpu[sender.name].append(took)


def _hosts(url: str, n: int) -> None:
    """The image, and hosts 2..n up with half host1's memory (host1 registers itself)."""
    from tests.factories import make_compute_node, register_cirros
    from workflows.api import common

    register_cirros(url, common.settings().image_store_path)
    for i in range(2, n + 1):
        make_compute_node(url, f"host{i}", memory_mb=16384)


def _keep_up(url: str) -> None:
    """Hosts 2..n heartbeat (outside the measure): a long run outlives service_down_time."""
    from sqlalchemy import update

    from models import Service, utcnow
    from models.db import session_scope

    with session_scope(url) as session:
        session.execute(update(Service).values(updated_at=utcnow()))


def _boot_all(args: argparse.Namespace, url: str, clock: StepClock) -> None:
    from tests.unit.workflows.servers import in_thread_worker
    from workflows import api

    api.create_flavor("bench", 1, 512, 1)
    booted: list[str] = []
    with in_thread_worker(("scheduler", "compute.host1"), concurrency=2):
        for i in range(args.warmup + args.boots):
            if i % BATCH == 0:
                _keep_up(url)
            clock.on = i >= args.warmup
            [uuid] = api.boot(f"s{i}", "bench", "cirros")
            api.wait(uuid, "ACTIVE", timeout=60)
            clock.on = False
            booted.append(uuid)
            if len(booted) == BATCH or i == args.warmup + args.boots - 1:
                clock.on = i >= args.warmup
                for server in booted:
                    t0 = time.thread_time_ns()
                    api.delete(server)
                    if clock.on:
                        clock.cpu[API_DELETE].append(time.thread_time_ns() - t0)
                for server in booted:
                    api.wait(server, "DELETED", timeout=60)
                clock.on = False
                booted.clear()


def _report(clock: StepClock, out: str | None) -> None:
    figures = {}
    for short, name in [*STEPS.items(), ("delete", API_DELETE)]:
        values = [v / 1e6 for v in clock.cpu.get(name, [])]
        if not values:
            continue
        figures[short] = {
            "n": len(values),
            "median_ms": statistics.median(values),
            "min_ms": min(values),
        }
        print(
            f"{short:9s} ({name}): median {statistics.median(values):6.3f} ms"
            f"  min {min(values):6.3f} ms  (n={len(values)})"
        )
    if out:
        Path(out).write_text(json.dumps(figures, indent=2) + "\n")
    if clock.profiler is not None:
        pstats.Stats(clock.profiler).sort_stats("cumulative").print_stats(50)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/4")
    parser.add_argument("--boots", type=int, default=150)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--pg-prefix", default="step_cpu", help="the PostgreSQL database's")
    parser.add_argument("--profile", choices=sorted(STEPS))
    parser.add_argument("--out", help="the figures as JSON")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="novaq-step-cpu-"))
    pg_name = f"{args.pg_prefix}_{os.getpid()}" if args.database == "postgresql" else None
    url = _configure(args.broker, state, pg_name)
    import redis
    from celery.signals import task_postrun, task_prerun

    from models.db import dispose_all
    from models.migrate import upgrade

    client = redis.Redis.from_url(args.broker)
    client.flushdb()
    clock = StepClock(STEPS[args.profile] if args.profile else None)
    task_prerun.connect(clock.started, weak=False)
    task_postrun.connect(clock.ended, weak=False)
    try:
        upgrade(url)
        _hosts(url, args.hosts)
        _boot_all(args, url, clock)
        _report(clock, args.out)
    finally:
        dispose_all()
        if pg_name is not None:
            from bench.pg_databases import drop_pg

            drop_pg(pg_name)
        client.flushdb()
        client.close()
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
