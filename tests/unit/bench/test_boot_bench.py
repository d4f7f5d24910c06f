"""``bench/boot_bench.py`` in a tiny configuration, end to end: a check that the
instrument works (it prints its figures and leaves nothing behind), not a timed test.

It needs no shared server: the bench runs the launcher's embedded Redis and SQLite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, text

from bench import sql_counts
from bench.boot_report import percentile
from bench.broker_stats import with_db

ROOT = Path(__file__).resolve().parents[3]


def _processes_mentioning(marker: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            blob = (proc / "environ").read_bytes() + (proc / "cmdline").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if marker.encode() in blob:
            found.append(proc.name)
    return found


def _boot_bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``bench/boot_bench.py`` on 2 hosts, SQLite, 5 boots, 1 repetition, and ``args``.

    (A failed run's clean-up takes the same ``finally`` blocks; it is not tested here too,
    where a second cluster start would double the test's 30-50 s.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
    argv = [sys.executable, str(ROOT / "bench" / "boot_bench.py"), "--hosts", "2"]
    argv += ["--boots", "5", "--repetitions", "1", "--warmup", "2", "--databases", "sqlite"]
    argv += ["--heartbeat-boots", "3", "--tmp-dir", str(tmp_path), "--deadline", "150", *args]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=170)


def _left_behind(tmp_path: Path) -> list[object]:
    """Its state (broker, database, logs) and every process it started, if any remain."""
    return [*tmp_path.iterdir(), *_processes_mentioning(str(tmp_path))]


@pytest.mark.timeout(180)
def test_boot_bench_prints_every_figure_and_cleans_up(tmp_path: Path) -> None:
    done = _boot_bench(tmp_path, "--durable-guest")  # (its servers' guests: the same path)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    titles = ("Throughput", "The durable bare app", "Per boot and per delete", "by step")
    for title in (*titles, "api.boot vs", "Heartbeat"):
        assert title in out, out
    # novaq's boots/s, the bare app's and their ratio; the durable app's and its two ratios.
    for title in titles[:2]:
        row = re.search(r"^\s*sqlite" + r" \|\s*([\d.]+)" * 3, out.split(title, 1)[1], re.M)
        assert row is not None, out
        assert all(float(v) > 0 for v in row.groups())
    assert re.search(r"^\s*sqlite \| +delete \| +durable \|", out, re.M), out
    assert "compute.build_and_run_instance" in out and "scheduler.select_destinations" in out
    assert _left_behind(tmp_path) == []


def test_counter_tells_write_commits_from_read_only_ones() -> None:
    engine = create_engine("sqlite://")
    counter = sql_counts.Counter(None)
    sql_counts.listen(counter, engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    with engine.begin() as conn:
        conn.execute(text("SELECT x FROM t")).all()
    with engine.connect() as conn:
        conn.execute(text("SELECT x FROM t")).all()
        conn.rollback()
    counts = counter.snapshot()[sql_counts.OUTSIDE]
    assert counts == {
        "statements": 4,
        "transactions": 4,
        "write_commits": 2,  # the CREATE TABLE and the INSERT
        "read_commits": 1,
        "rollbacks": 1,
        "cpu_us": 0,  # no task ran; the bench's own counter keeps no process CPU
        "lock_us": 0,  # no BEGIN IMMEDIATE: SQLite's write lock never taken at BEGIN
        "lock_cpu_us": 0,
    }


def test_counter_times_sqlite_write_lock_from_begin_immediate_to_commit(tmp_path: Path) -> None:
    """The write lock held: from a ``BEGIN IMMEDIATE`` that returned to its COMMIT, wall
    time and the holder's CPU (as ``models.db``'s writers begin)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'lock.db'}")

    @event.listens_for(engine, "connect")
    def _no_pysqlite_begin(dbapi_conn, _record):  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _immediate(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    counter = sql_counts.Counter(None)
    sql_counts.listen(counter, engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    before = counter.snapshot()[sql_counts.OUTSIDE]
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        deadline = time.thread_time() + 0.03
        while time.thread_time() < deadline:  # CPU burnt while the lock is held
            pass
        time.sleep(0.02)  # and a wait that burns none
    after = counter.snapshot()[sql_counts.OUTSIDE]
    held_us = after["lock_us"] - before["lock_us"]
    cpu_us = after["lock_cpu_us"] - before["lock_cpu_us"]
    assert held_us >= 50_000, after
    assert 30_000 <= cpu_us < held_us, after


def test_counter_charges_a_task_the_cpu_time_of_its_thread(tmp_path: Path) -> None:
    """A worker's counter: the CPU a task's thread burnt between ``task_prerun`` and
    ``task_postrun`` under the task's name, the rest of the process's under OUTSIDE."""
    counter = sql_counts.Counter(tmp_path)
    task = type("Task", (), {"name": "compute.busy"})()
    counter.on_prerun(sender=task)
    deadline = time.thread_time() + 0.05
    while time.thread_time() < deadline:  # 50 ms of this thread's CPU
        pass
    counter.on_postrun()
    counts = counter.snapshot()
    assert 50_000 <= counts["compute.busy"]["cpu_us"] < 1_000_000
    process_us = time.process_time_ns() // 1000
    outside = counts[sql_counts.OUTSIDE]["cpu_us"]
    assert 0 < outside <= process_us - counts["compute.busy"]["cpu_us"]
    assert counter.changed.is_set()  # a task alone (no SQL) gets its counts written


def test_redis_urls_get_the_database_asked_for() -> None:
    assert with_db("redis://:pw@127.0.0.1:6379/0", 3) == "redis://:pw@127.0.0.1:6379/3"
    assert with_db("redis://127.0.0.1:6379", 8) == "redis://127.0.0.1:6379/8"


def test_percentiles_are_taken_from_the_samples() -> None:
    samples = [float(v) for v in range(1, 101)]
    assert (percentile(samples, 0.5), percentile(samples, 0.95)) == (50.0, 95.0)
    assert percentile(samples, 1.0) == 100.0


def _recorded(url: str) -> list[tuple[str, str]]:
    """What another connection reads of the durable bare app's servers."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT uuid, state FROM servers ORDER BY uuid")).all()
    finally:
        engine.dispose()
    return [(uuid, state) for uuid, state in rows]


def test_the_durable_bare_app_records_each_state_in_a_committed_wal_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bench import bare_app

    path = tmp_path / "bare.sqlite"
    target = f"{bare_app.SQLITE_PREFIX}{path}"
    monkeypatch.setenv(bare_app.durable_env("sqlite"), target)
    bare_app.record("s1", "building", bare_app.target_of(None))
    assert not path.exists()  # not durable: no database work at all

    bare_app.create_table(target)
    bare_app.record("s1", "building", bare_app.target_of("sqlite"))
    bare_app.record("s1", "active", target)
    bare_app.record("s2", "deleting", target)
    bare_app.close()
    # Another connection sees what each call committed, in WAL mode.
    engine = create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
    engine.dispose()
    assert _recorded(f"sqlite:///{path}") == [("s1", "active"), ("s2", "deleting")]


def test_the_durable_bare_app_records_each_state_in_postgresql(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench import bare_app
    from bench.pg_databases import drop_pg, pg_url
    from tests.tcp_proxy import reachable

    if not reachable(5432):
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    name = f"bench_bare_test_{os.getpid()}"
    target = pg_url(name)
    try:
        bare_app.create_table(target)
        monkeypatch.setenv(bare_app.durable_env("postgresql"), target)
        bare_app.record("s1", "scheduled", bare_app.target_of("postgresql"))
        bare_app.record("s1", "deleted", target)
        bare_app.record("s2", "active", target)
        assert _recorded(target.replace("postgresql://", "postgresql+psycopg://", 1)) == [
            ("s1", "deleted"),
            ("s2", "active"),
        ]
    finally:
        bare_app.close()
        drop_pg(name)


def test_a_durable_step_names_its_kind_of_database_never_its_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench import bare_app

    assert bare_app.durable_kwargs(None) == {}  # the bare app's messages are unchanged
    assert bare_app.durable_kwargs("sqlite") == {"durable": "sqlite"}
    assert bare_app.durable_kwargs("sqlite", guest=True) == {"durable": "sqlite", "guest": True}
    monkeypatch.setenv(bare_app.durable_env("postgresql"), "postgresql://u@h/db")
    assert bare_app.target_of("postgresql") == "postgresql://u@h/db"
    with pytest.raises(ValueError, match="mysql"):
        bare_app.durable_env("mysql")


def test_a_durable_bare_servers_guest_is_started_at_build_and_gone_after_delete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import libvirt

    from bench import bare_guest

    monkeypatch.setenv(bare_guest.DIR_ENV, str(tmp_path))
    server = "0b7e6f52-3c1d-4c4e-9a43-6f0d1f8e2a11"
    host = libvirt.open("test:///default")  # (the test driver's domains are the process's own)
    bare_guest.up(server)
    try:
        assert host.lookupByUUIDString(server).isActive()
        assert (tmp_path / "bare-guests" / server / "disk").is_file()
    finally:
        bare_guest.down(server)
    with pytest.raises(libvirt.libvirtError) as gone:
        host.lookupByUUIDString(server)
    assert gone.value.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN
    assert not (tmp_path / "bare-guests" / server).exists()
    bare_guest.down(server)  # a guest gone already is fine (a redelivered delete)
