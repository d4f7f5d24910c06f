"""SQL statements and transactions counted in every process of a novaq cluster, by the
task that ran them, for ``bench/boot_bench.py``.

A worker runs through this module instead of ``celery`` itself::

    BENCH_SQL_COUNTS_DIR=<dir> python -m bench.sql_counts -A tasks worker ...

It listens to every SQLAlchemy ``Engine`` of the process (statements, BEGIN, COMMIT,
ROLLBACK) and to Celery's ``task_prerun``/``task_postrun``, so each count lands under the
name of the task running in that thread, or under ``OUTSIDE`` (heartbeats, the worker's
start). Each process (a prefork child too) writes its totals to ``<dir>/<pid>.json``
a few times a second; :func:`read_totals` sums the files. Nothing in the product changes:
only the listeners are added, and they cost a dictionary update per event.

A transaction is counted as a *write* commit when it ran an INSERT, UPDATE or DELETE (or DDL), a
*read-only* commit otherwise, so that read-only transactions show separately. The BEGIN a
SQLite engine sends itself (``BEGIN IMMEDIATE``) is a transaction, not a statement, so
the statement counts of SQLite and PostgreSQL compare.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

DIR_ENV = "BENCH_SQL_COUNTS_DIR"
OUTSIDE = "(outside tasks)"
#: What is counted, in the order of the tables; ``cpu_us``: the CPU time (microseconds) of
#: the thread that ran the task, from ``task_prerun`` to ``task_postrun``; under
#: ``OUTSIDE``, the rest of the process's CPU time (every other thread: the consumer's
#: loop, heartbeats, guest lifecycle events, Celery's events and the counters' own dumps).
#: ``lock_us``/``lock_cpu_us``: how long SQLite's write lock was held (wall time from a
#: ``BEGIN IMMEDIATE`` that returned to the COMMIT or ROLLBACK), and the CPU time the
#: holding thread spent meanwhile: every other writer of the database waits that long.
FIELDS = (
    "statements",
    "transactions",
    "write_commits",
    "read_commits",
    "rollbacks",
    "cpu_us",
    "lock_us",
    "lock_cpu_us",
)
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")
_DUMP_INTERVAL_S = 0.2


class Counter:
    """The counts of this process, by bucket (a task's name or ``OUTSIDE``)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FIELDS, 0))
        self.local = threading.local()
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.only_thread: int | None = None  # count this thread only (the bench's API)
        self.task_cpu_us = 0  # the CPU time of every task run here, summed

    def bucket(self) -> str:
        return getattr(self.local, "task", None) or OUTSIDE

    def add(self, field: str, amount: int = 1) -> None:
        if self.only_thread is not None and threading.get_ident() != self.only_thread:
            return
        with self.lock:
            self.counts[self.bucket()][field] += amount
        self.changed.set()

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self.lock:
            if self.directory is not None:  # a worker: the process's CPU outside its tasks
                process_us = time.process_time_ns() // 1000
                self.counts[OUTSIDE]["cpu_us"] = process_us - self.task_cpu_us
            return {name: dict(values) for name, values in self.counts.items()}

    # -- SQLAlchemy events -----------------------------------------------------------------
    def on_begin(self, conn: Any) -> None:
        conn.info["bench_wrote"] = False
        self.add("transactions")

    def on_statement(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        verb = statement.lstrip()[:7].upper()
        if verb.startswith("BEGIN"):
            return
        if verb.startswith(_WRITES):
            conn.info["bench_wrote"] = True
        self.add("statements")

    def on_executed(self, conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("BEGIN IMMEDIATE"):  # SQLite's write lock, taken
            conn.info["bench_locked"] = (time.perf_counter_ns(), time.thread_time_ns())

    def _unlocked(self, conn: Any) -> None:
        locked = conn.info.pop("bench_locked", None)
        if locked is not None:
            self.add("lock_us", (time.perf_counter_ns() - locked[0]) // 1000)
            self.add("lock_cpu_us", (time.thread_time_ns() - locked[1]) // 1000)

    def on_commit(self, conn: Any) -> None:
        self._unlocked(conn)
        self.add("write_commits" if conn.info.get("bench_wrote") else "read_commits")

    def on_rollback(self, conn: Any) -> None:
        self._unlocked(conn)
        self.add("rollbacks")

    # -- Celery signals ----------------------------------------------------------------------
    def on_prerun(self, sender: Any = None, **_: Any) -> None:
        self.local.task = getattr(sender, "name", None)
        self.local.cpu_ns = time.thread_time_ns()

    def on_postrun(self, **_: Any) -> None:
        task = getattr(self.local, "task", None)
        started = getattr(self.local, "cpu_ns", None)
        if task is not None and started is not None:
            with self.lock:
                self.counts[task]["cpu_us"] += (time.thread_time_ns() - started) // 1000
                self.task_cpu_us += (time.thread_time_ns() - started) // 1000
            self.changed.set()
        self.local.task = None

    # -- the file --------------------------------------------------------------------------
    def dump(self) -> None:
        if self.directory is None:
            return
        path = self.directory / f"{os.getpid()}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.snapshot()), encoding="utf-8")
        tmp.replace(path)

    def dump_forever(self) -> None:
        while True:
            self.changed.wait()
            self.changed.clear()
            self.dump()
            time.sleep(_DUMP_INTERVAL_S)

    def start_dumping(self) -> None:
        threading.Thread(target=self.dump_forever, name="bench-sql-counts", daemon=True).start()

    def after_fork(self) -> None:
        """A prefork child: counts of its own from zero, and a dumper of its own."""
        # (a lock another thread of the parent held at the fork would stay held here)
        self.lock, self.changed = threading.Lock(), threading.Event()
        self.counts.clear()
        self.task_cpu_us = 0
        self.local = threading.local()
        self.start_dumping()


def listen(counter: Counter, target: Any) -> None:
    """Count the events of ``target``: an engine, or ``Engine`` (every engine)."""
    from sqlalchemy import event

    event.listen(target, "begin", counter.on_begin)
    event.listen(target, "before_cursor_execute", counter.on_statement)
    event.listen(target, "after_cursor_execute", counter.on_executed)
    event.listen(target, "commit", counter.on_commit)
    event.listen(target, "rollback", counter.on_rollback)


def install(directory: Path | None) -> Counter:
    """Count every engine's events in this process (and its forks)."""
    from celery.signals import task_postrun, task_prerun
    from sqlalchemy import Engine

    counter = Counter(directory)
    listen(counter, Engine)
    task_prerun.connect(counter.on_prerun, weak=False)
    task_postrun.connect(counter.on_postrun, weak=False)
    if directory is not None:
        counter.start_dumping()
        os.register_at_fork(after_in_child=counter.after_fork)
        atexit.register(counter.dump)
    return counter


def read_totals(directory: Path) -> dict[str, dict[str, int]]:
    """The counts of every process that wrote to ``directory``, summed by bucket."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FIELDS, 0))
    for path in directory.glob("*.json"):
        try:
            counts = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # replaced while read: the next read has it
            continue
        for name, values in counts.items():
            for field in FIELDS:
                totals[name][field] += values.get(field, 0)
    return dict(totals)


def main() -> None:
    """Run ``celery`` with the counters installed (the arguments are celery's)."""
    install(Path(os.environ[DIR_ENV]))
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
