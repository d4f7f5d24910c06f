"""A heartbeat while SQLite's main write lock is busy.

    .venv/bin/python bench/heartbeat_bench.py [--writers 4] [--seconds 15]

``--writers`` processes run write transactions back to back on one SQLite database
(``session_scope``: ``BEGIN IMMEDIATE``, an UPDATE, an INSERT, about 1 ms of Python work
and 1 ms of waiting while the lock is held, the commit's fsync), as a busy cluster's
steps do; meanwhile this process heartbeats every 20 ms (``compute.servicegroup.heartbeat``:
``models.db.liveness_write``, into the liveness file, ``models.liveness``, whose write lock
the writers never take). Printed: the heartbeat's p50/p95/max and the writers'
transactions per second. (Until issue 16's eleventh pass this bench compared the writer
gate on and off; the gate went with the heartbeats' move out of the main database.)
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, update  # noqa: E402

from compute import servicegroup  # noqa: E402
from compute.servicegroup import COMPUTE, register_service  # noqa: E402
from models import Service, TaskLog, utcnow  # noqa: E402
from models.db import dispose_all, session_scope  # noqa: E402
from models.migrate import upgrade  # noqa: E402
from novaq.settings import Settings  # noqa: E402

HEARTBEAT_S = 0.02


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def writer(url: str, stop: Any, counts: Any, index: int) -> None:
    while not stop.is_set():
        with session_scope(url) as session:
            session.execute(update(Service).where(Service.id == 1).values(updated_at=utcnow()))
            _busy(0.001)  # the ORM's and the step's own work while the lock is held
            session.execute(
                insert(TaskLog).values(
                    task_name="bench",
                    state="DONE",
                    host=f"w{index}",
                    period_beginning=utcnow(),
                    period_ending=utcnow(),
                    errors=0,
                )
            )
            time.sleep(0.001)  # a driver call, a publish: the lock held, the CPU not used
        with counts.get_lock():
            counts.value += 1


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--seconds", type=float, default=15.0)
    return p.parse_args()


def main() -> int:
    args = parse_args()
    state = Path(tempfile.mkdtemp(prefix="novaq-heartbeat-bench-"))
    url = f"sqlite:///{state / 'bench.sqlite'}"
    upgrade(url)
    with session_scope(url) as session:
        register_service(session, "bench", COMPUTE, "compute.bench", Settings())
    dispose_all()  # no connection crosses the fork
    stop, counts = mp.Event(), mp.Value("q", 0)
    procs = [
        mp.Process(target=writer, args=(url, stop, counts, i), daemon=True)
        for i in range(args.writers)
    ]
    for proc in procs:
        proc.start()
    latencies: list[float] = []
    try:
        time.sleep(1.0)  # the writers connect and get going
        counted, started = counts.value, time.monotonic()
        while time.monotonic() - started < args.seconds:
            t0 = time.perf_counter()
            servicegroup.heartbeat(url, 1)
            latencies.append((time.perf_counter() - t0) * 1000)
            time.sleep(HEARTBEAT_S)
        rate = (counts.value - counted) / (time.monotonic() - started)
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=10)
        dispose_all()
        shutil.rmtree(state, ignore_errors=True)
    values = sorted(latencies)
    p95 = values[int(0.95 * (len(values) - 1))]
    print(f"heartbeat_bench: {args.writers} writers, {args.seconds} s")
    print("heartbeats | p50 ms | p95 ms | max ms | writer txns/s")
    print(
        f"{len(values):10d} | {statistics.median(values):6.2f} | {p95:6.2f} "
        f"| {values[-1]:6.1f} | {rate:13.0f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
