"""A heartbeat against SQLite's write lock, with the writer gate and without it, in one run.

    .venv/bin/python bench/heartbeat_bench.py [--writers 4] [--phases 6] [--phase-s 5]

``--writers`` processes run write transactions back to back on one SQLite database
(``session_scope``: ``BEGIN IMMEDIATE``, an UPDATE, an INSERT, about 1 ms of Python work
and 1 ms of waiting while the lock is held, the commit's fsync), as a busy cluster's
steps do; meanwhile this process heartbeats every 20 ms (``compute.servicegroup.heartbeat``:
``models.db.liveness_write``). Phases alternate between the gate on (``models.writer_gate``:
a heartbeat that finds the lock taken closes the gate, and writers that have not begun wait
for it) and the gate off (the same code with the gate's two calls made no-ops: a heartbeat
polls the lock every millisecond, writers sleep in SQLite's busy handler). Printed per side:
the heartbeat's p50/p95/max and the writers' transactions per second (the gate must not cost
them throughput). The figures are noisy on a shared machine: compare the sides of one run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import insert, update  # noqa: E402

from compute import servicegroup  # noqa: E402
from models import Service, TaskLog, utcnow, writer_gate  # noqa: E402
from models.db import dispose_all, session_scope  # noqa: E402
from models.migrate import upgrade  # noqa: E402

HEARTBEAT_S = 0.02


def _switchable_gate(gate_on: Any) -> None:
    """Make this process's gate follow the shared flag ``gate_on`` (the bench's A/B)."""
    wait, closed = writer_gate.Gate.wait_until_open, writer_gate.Gate.closed

    def wait_until_open(self: writer_gate.Gate) -> None:
        if gate_on.value:
            wait(self)

    @contextmanager
    def maybe_closed(self: writer_gate.Gate) -> Iterator[Any]:
        with closed(self) if gate_on.value else nullcontext() as held:
            yield held

    writer_gate.Gate.wait_until_open = wait_until_open  # type: ignore[method-assign]
    writer_gate.Gate.closed = maybe_closed  # type: ignore[method-assign,assignment]


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def writer(url: str, gate_on: Any, stop: Any, counts: Any, index: int) -> None:
    _switchable_gate(gate_on)
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
            counts[int(gate_on.value)] += 1


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--writers", type=int, default=4)
    p.add_argument("--phases", type=int, default=6, help="phases in all, alternating sides")
    p.add_argument("--phase-s", type=float, default=5.0)
    return p.parse_args()


def main() -> int:
    args = parse_args()
    state = Path(tempfile.mkdtemp(prefix="novaq-heartbeat-bench-"))
    url = f"sqlite:///{state / 'bench.sqlite'}"
    upgrade(url)
    with session_scope(url) as session:
        session.add(Service(host="bench", binary="novaq-compute", topic="compute"))
    dispose_all()  # no connection crosses the fork
    gate_on, stop = mp.Value("b", 1), mp.Event()
    counts = mp.Array("q", 2)
    procs = [
        mp.Process(target=writer, args=(url, gate_on, stop, counts, i), daemon=True)
        for i in range(args.writers)
    ]
    for proc in procs:
        proc.start()
    _switchable_gate(gate_on)
    latencies: dict[bool, list[float]] = {True: [], False: []}
    seconds: dict[bool, float] = {True: 0.0, False: 0.0}
    try:
        time.sleep(1.0)  # the writers connect and get going
        for phase in range(args.phases):
            on = phase % 2 == 0
            gate_on.value = int(on)
            started = time.monotonic()
            while time.monotonic() - started < args.phase_s:
                t0 = time.perf_counter()
                servicegroup.heartbeat(url, 1)
                latencies[on].append((time.perf_counter() - t0) * 1000)
                time.sleep(HEARTBEAT_S)
            seconds[on] += time.monotonic() - started
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=10)
        dispose_all()
        shutil.rmtree(state, ignore_errors=True)
    print(f"heartbeat_bench: {args.writers} writers, {args.phases} phases of {args.phase_s} s")
    print("gate | heartbeats | p50 ms | p95 ms | max ms | writer txns/s")
    print("-----+------------+--------+--------+--------+--------------")
    for on in (True, False):
        values = sorted(latencies[on])
        p95 = values[int(0.95 * (len(values) - 1))]
        rate = counts[int(on)] / seconds[on]
        print(
            f"{'on' if on else 'off':>4} | {len(values):10d} | {statistics.median(values):6.2f} "
            f"| {p95:6.2f} | {values[-1]:6.1f} | {rate:13.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
