"""``liveness_write(url, statement)``: a heartbeat's one write of ``service_liveness``
(``models.liveness``), in autocommit on an engine of its own. On SQLite that engine is
the liveness file's, beside the main database, which the main engines attach read-only:
a writer holding the main database's write lock never holds a heartbeat up. Both
databases, for real."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import Update, insert, select, text, update

from models import ServiceLiveness
from models.db import dispose_all, get_engine, liveness_engine, liveness_write, session_scope
from models.migrate import upgrade
from novaq.exceptions import DatabaseUnavailable

_LIVE = ServiceLiveness.__table__.c


def _prepare(url: str) -> str:
    upgrade(url)
    liveness_write(url, insert(ServiceLiveness).values(service_id=1, report_count=0))
    return url


def _beat() -> Update:
    return (
        update(ServiceLiveness)
        .where(_LIVE.service_id == 1)
        .values(report_count=_LIVE.report_count + 1)
    )


def _beats(url: str) -> int:
    with session_scope(url, read_only=True) as session:
        return int(session.scalars(select(_LIVE.report_count)).one())


@pytest.fixture
def sqlite_url(empty_sqlite_url: str) -> str:
    return _prepare(empty_sqlite_url)


@pytest.fixture
def pg_url(empty_pg_url: str) -> str:
    return _prepare(empty_pg_url)


def test_a_liveness_write_is_committed_at_once_on_its_own_engine(url: str) -> None:
    assert liveness_write(url, _beat()) == 1
    assert liveness_write(url, _beat()) == 1
    assert _beats(url) == 2
    assert liveness_engine(url) is not get_engine(url)
    assert liveness_engine(url) is liveness_engine(url)


def test_an_open_reader_does_not_hold_up_a_liveness_write(url: str) -> None:
    with session_scope(url, read_only=True, snapshot=True) as reader:
        assert reader.scalars(select(_LIVE.report_count)).one() == 0
        assert liveness_write(url, _beat()) == 1
        assert reader.scalars(select(_LIVE.report_count)).one() == 0  # its snapshot
    assert _beats(url) == 1


def test_sqlite_liveness_is_a_private_wal_file_of_its_own(sqlite_url: str) -> None:
    main = sqlite_url.removeprefix("sqlite:///")
    with liveness_engine(sqlite_url).connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        (path,) = [r[2] for r in conn.exec_driver_sql("PRAGMA database_list") if r[1] == "main"]
    assert path == os.path.abspath(f"{main}-liveness")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with get_engine(sqlite_url).connect() as conn:  # the writers' engine: unchanged
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("SELECT count(*) FROM services").scalar() == 0


def test_postgresql_liveness_connection_does_not_wait_for_the_wal_flush(pg_url: str) -> None:
    liveness_write(pg_url, _beat())
    with liveness_engine(pg_url).connect() as conn:
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off"
    with get_engine(pg_url).connect() as conn:  # the writers' engine: unchanged
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"


def test_sqlite_liveness_write_goes_through_while_a_writer_holds_the_main_lock(
    sqlite_url: str,
) -> None:
    main = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        main.execute("BEGIN IMMEDIATE")  # another process's writer, holding the lock
        main.execute("UPDATE services SET version = version + 1")
        start = time.monotonic()
        assert liveness_write(sqlite_url, _beat()) == 1
        assert time.monotonic() - start < 0.5  # (the main lock's busy_timeout is 30 s)
    finally:
        main.execute("ROLLBACK")
        main.close()
    assert _beats(sqlite_url) == 1


def test_a_main_writers_transaction_reads_liveness_without_holding_heartbeats_up(
    sqlite_url: str,
) -> None:
    """``BEGIN IMMEDIATE`` on the main database takes only a read snapshot of the liveness
    file, attached read-only: a heartbeat in another thread commits meanwhile."""
    took: list[int] = []
    with session_scope(sqlite_url) as session:  # BEGIN IMMEDIATE: holds the main lock
        assert session.scalars(select(_LIVE.report_count)).one() == 0
        beat = threading.Thread(target=lambda: took.append(liveness_write(sqlite_url, _beat())))
        beat.start()
        beat.join(timeout=5)
        assert took == [1]
        assert session.scalars(select(_LIVE.report_count)).one() == 0  # its snapshot
    assert _beats(sqlite_url) == 1


def test_the_main_engines_cannot_write_sqlite_liveness(sqlite_url: str) -> None:
    with pytest.raises(Exception, match="readonly database"), session_scope(sqlite_url) as s:
        s.execute(_beat())
    assert _beats(sqlite_url) == 0


def test_a_lost_sqlite_liveness_file_is_made_again(sqlite_url: str) -> None:
    dispose_all()
    for suffix in ("", "-wal", "-shm"):
        path = sqlite_url.removeprefix("sqlite:///") + "-liveness" + suffix
        if os.path.exists(path):
            os.remove(path)
    with session_scope(sqlite_url, read_only=True) as session:
        assert session.scalars(select(_LIVE.report_count)).all() == []
    assert liveness_write(sqlite_url, _beat()) == 0  # no row: the heartbeat makes it


def test_an_unreachable_database_is_unavailable() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"
    try:
        with pytest.raises(DatabaseUnavailable):
            liveness_write(url, _beat())
    finally:
        dispose_all()


def test_a_wrong_statement_is_raised_as_it_is(url: str) -> None:
    with pytest.raises(Exception) as raised:
        liveness_write(url, text("UPDATE no_such_table SET n = 1"))
    assert not isinstance(raised.value, DatabaseUnavailable)


def test_postgresql_liveness_write_sends_no_ping_and_rides_over_a_closed_connection(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = liveness_engine(pg_url)
    pings: list[object] = []
    ping = engine.dialect.do_ping
    monkeypatch.setattr(engine.dialect, "do_ping", lambda conn: pings.append(conn) or ping(conn))
    assert liveness_write(pg_url, _beat()) == 1
    with engine.connect() as conn:  # the heartbeat's pooled connection (pool of one)
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
    with session_scope(pg_url) as session:  # a restart, an administrator: the backend goes
        session.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    assert liveness_write(pg_url, _beat()) == 1  # found closed, retried on a new one
    assert liveness_write(pg_url, _beat()) == 1
    assert _beats(pg_url) == 3
    assert pings == []


_LOCK_PROBE = r"""
import fcntl, struct, sys
with open(sys.argv[1], "r+b") as f:
    probe = struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0x40000002, 510, 0)  # SQLite's SHARED bytes
    found = struct.unpack("hhqqi", fcntl.fcntl(f, fcntl.F_GETLK, probe))[0]
print("held" if found != fcntl.F_UNLCK else "free")
"""


def test_a_new_main_connection_keeps_this_processs_locks_on_the_liveness_file(
    sqlite_url: str,
) -> None:
    """Regression (boot_bench, "disk I/O error"): making sure of the liveness file at each
    new connection closed a descriptor of it, which dropped every POSIX lock this process
    held on it, so another process's closing connection deleted the WAL under it."""
    liveness_write(sqlite_url, _beat())  # the liveness engine's connection stays open
    with get_engine(sqlite_url).connect(), get_engine(sqlite_url).connect():
        pass  # a new connection of the main engine: the file made sure of again
    path = sqlite_url.removeprefix("sqlite:///") + "-liveness"
    probe = subprocess.run(
        [sys.executable, "-c", _LOCK_PROBE, path], capture_output=True, text=True, check=True
    )
    assert probe.stdout.strip() == "held"
