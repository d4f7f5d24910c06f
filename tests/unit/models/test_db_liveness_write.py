"""``liveness_write(url, statement)``: a heartbeat's one UPDATE, in autocommit on an engine
of its own. On SQLite it polls the write lock every millisecond instead of sleeping in the
busy handler's steps, and commits with ``synchronous=NORMAL``; on PostgreSQL its
connection has ``synchronous_commit=off``. Both databases, for real."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Update, column, select, table, text, update

from models import db
from models.db import dispose_all, get_engine, liveness_engine, liveness_write, session_scope
from novaq.exceptions import DatabaseUnavailable

TABLE = "novaq_liveness_probe"
probe = table(TABLE, column("n"), column("beats"))


def _create(url: str) -> None:
    with session_scope(url) as session:
        session.execute(text(f"DROP TABLE IF EXISTS {TABLE}"))
        session.execute(text(f"CREATE TABLE {TABLE} (n int PRIMARY KEY, beats int NOT NULL)"))
        session.execute(text(f"INSERT INTO {TABLE} VALUES (1, 0)"))


def _beat() -> Update:
    return update(probe).where(probe.c.n == 1).values(beats=probe.c.beats + 1)


def _beats(url: str) -> int:
    with session_scope(url, read_only=True) as session:
        return int(session.scalars(select(probe.c.beats)).one())


@pytest.fixture
def sqlite_url(empty_sqlite_url: str) -> str:
    _create(empty_sqlite_url)
    return empty_sqlite_url


@pytest.fixture
def pg_url(empty_pg_url: str) -> str:
    _create(empty_pg_url)
    return empty_pg_url


def test_a_liveness_write_is_committed_at_once_on_its_own_engine(url: str) -> None:
    assert liveness_write(url, _beat()) == 1
    assert liveness_write(url, _beat()) == 1
    assert _beats(url) == 2
    assert liveness_engine(url) is not get_engine(url)
    assert liveness_engine(url) is liveness_engine(url)


def test_an_open_reader_does_not_hold_up_a_liveness_write(url: str) -> None:
    with session_scope(url, read_only=True, snapshot=True) as reader:
        assert reader.scalars(select(probe.c.beats)).one() == 0
        assert liveness_write(url, _beat()) == 1
        assert reader.scalars(select(probe.c.beats)).one() == 0  # its snapshot
    assert _beats(url) == 1


def test_sqlite_liveness_connection_polls_and_commits_without_fsync(sqlite_url: str) -> None:
    with liveness_engine(sqlite_url).connect() as conn:
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 0
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    with get_engine(sqlite_url).connect() as conn:  # the writers' engine: unchanged
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 2  # FULL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000


def test_postgresql_liveness_connection_does_not_wait_for_the_wal_flush(pg_url: str) -> None:
    liveness_write(pg_url, _beat())
    with liveness_engine(pg_url).connect() as conn:
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "off"
    with get_engine(pg_url).connect() as conn:  # the writers' engine: unchanged
        assert conn.exec_driver_sql("SHOW synchronous_commit").scalar() == "on"


def test_sqlite_liveness_write_waits_for_a_writer_and_goes_through_after_it(
    sqlite_url: str,
) -> None:
    took: list[int] = []
    with session_scope(sqlite_url) as session:  # BEGIN IMMEDIATE: holds the write lock
        session.execute(text(f"UPDATE {TABLE} SET beats = beats + 10"))
        writer = threading.Thread(target=lambda: took.append(liveness_write(sqlite_url, _beat())))
        writer.start()
        writer.join(timeout=0.3)
        assert writer.is_alive() and not took  # polling the lock
    writer.join(timeout=10)
    assert took == [1]
    assert _beats(sqlite_url) == 11  # after the writer's commit, on top of it


def test_sqlite_liveness_write_gives_up_as_the_database_being_unavailable(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "LIVENESS_LOCK_WAIT_S", 0.05)
    with session_scope(sqlite_url) as session:
        session.execute(text(f"UPDATE {TABLE} SET beats = beats + 10"))
        with pytest.raises(DatabaseUnavailable, match="database is locked"):
            liveness_write(sqlite_url, _beat())
    assert _beats(sqlite_url) == 10


def test_an_unreachable_database_is_unavailable() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/none?connect_timeout=2"
    try:
        with pytest.raises(DatabaseUnavailable):
            liveness_write(url, _beat())
    finally:
        dispose_all()


def test_a_wrong_statement_is_raised_as_it_is(url: str) -> None:
    with pytest.raises(Exception) as raised:
        liveness_write(url, update(table("no_such_table", column("n"))).values(n=1))
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
