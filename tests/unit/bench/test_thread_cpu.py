"""``bench/thread_cpu.py``'s bookkeeping: per-thread CPU from ``/proc``, the task CPU of
each process taken out, the threads py-spy names (no cluster is started here)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from bench import sql_counts, thread_cpu


def test_snapshot_reads_every_thread_of_a_process() -> None:
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    worker.start()
    try:
        snap = thread_cpu.snapshot({os.getpid(): "me"})
        assert (os.getpid(), os.getpid()) in snap
        assert (os.getpid(), worker.native_id) in snap
        assert all(ticks >= 0 for ticks in snap.values())
    finally:
        stop.set()


def test_rows_name_threads_and_show_tasks_and_exited_threads(tmp_path: Path) -> None:
    pids = {10: "compute.host1"}
    window = thread_cpu.Window(pids, tmp_path)
    window.snap0 = {(10, 10): 100, (10, 11): 50}
    window.snap1 = {(10, 10): 110, (10, 11): 80, (10, 12): 5}
    window.proc0, window.proc1 = {10: 150}, {10: 200}  # 5 ticks of a thread gone since
    window.task0, window.task1 = {10: 1000}, {10: 201000}  # 200 ms of tasks
    names = {(10, 10): "MainThread [x]", (10, 11): "ThreadPoolExecutor-0_0 [_worker]"}
    rows = window.rows(names)
    tick_ms = 1000 / thread_cpu.TICK
    assert rows["compute.host1      MainThread [x]"] == 10 * tick_ms
    assert rows["compute.host1      ThreadPoolExecutor-0_0 [_worker]"] == 30 * tick_ms
    assert rows["compute.host1      (new thread)"] == 5 * tick_ms
    assert rows["compute.host1      (threads that exited)"] == 5 * tick_ms
    assert rows["compute.host1      = TASKS (counted, included above)"] == 200.0


def test_task_cpu_sums_the_tasks_of_each_process_file(tmp_path: Path) -> None:
    counts = {
        "compute.build_and_run_instance": {"cpu_us": 700},
        "compute.terminate_instance": {"cpu_us": 300},
        sql_counts.OUTSIDE: {"cpu_us": 5000},
    }
    (tmp_path / "42.json").write_text(json.dumps(counts))
    assert thread_cpu.task_cpu(tmp_path) == {42: 1000}
    assert thread_cpu._outside_counted(tmp_path) == 5.0


def test_thread_names_from_a_py_spy_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    dump = (
        "Process 7: python -m bench.sql_counts\nPython v3.11.7\n\n"
        'Thread 7 (idle): "MainThread"\n    asynloop (celery/worker/loops.py:130)\n'
        "    <module> (bench/sql_counts.py:186)\n"
        'Thread 9 (idle): "lifecycle-events"\n    Queue.get (queue.py:171)\n'
        "    EventDispatcher._run (virt/libvirt/events.py:96)\n"
        "    Thread.run (threading.py:982)\n"
        "    Thread._bootstrap (threading.py:1002)\n"
    )

    def fake_run(*_: Any, **__: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess([], 0, stdout=dump, stderr="")

    monkeypatch.setattr(thread_cpu, "PYSPY", "py-spy")
    monkeypatch.setattr(thread_cpu.subprocess, "run", fake_run)
    names = thread_cpu.thread_names({7: "compute.host1"})
    assert names[(7, 7)] == "MainThread [<module> < asynloop]"
    assert names[(7, 9)] == "lifecycle-events [EventDispatcher._run < Queue.get]"


def test_no_thread_names_without_py_spy(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_run(*_: Any, **__: Any) -> subprocess.CompletedProcess[str]:
        raise AssertionError("py-spy run while none is installed")

    monkeypatch.setattr(thread_cpu, "PYSPY", "")
    monkeypatch.setattr(thread_cpu.subprocess, "run", no_run)
    assert thread_cpu.thread_names({7: "compute.host1"}) == {}
