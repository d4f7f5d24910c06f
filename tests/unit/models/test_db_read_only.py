"""``session_scope(url, read_only=True)``: a reader's transaction. On SQLite it takes no
write lock (a deferred BEGIN: a WAL read snapshot), so a writer's BEGIN IMMEDIATE goes
ahead while it is open; on PostgreSQL it is READ ONLY. A write in it, SQL or ORM, fails
with ``ReadOnlyTransactionError`` and changes nothing; it ends without a commit."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.orm import declarative_base as _declarative_base

from compute.sessions import savepoints, sessions_for
from models.db import get_engine, reader_engine, session_scope
from novaq.exceptions import DatabaseUnavailable, ReadOnlyTransactionError
from tests.unit.models.probe_table import probe_rows

TABLE = PROBE_TABLE = "novaq_read_only_probe"  # (the models conftest makes it)


class _Probe(_declarative_base()):  # type: ignore[misc]
    __tablename__ = TABLE
    n: Mapped[int] = mapped_column(primary_key=True)


def _rows(url: str) -> list[int]:
    return probe_rows(url, TABLE)


class _Ends:
    """The COMMITs and ROLLBACKs an engine's connections run."""

    def __init__(self, engine: Engine) -> None:
        self.commits = self.rollbacks = 0
        event.listen(engine, "commit", self._commit)
        event.listen(engine, "rollback", self._rollback)

    def _commit(self, _conn: object) -> None:
        self.commits += 1

    def _rollback(self, _conn: object) -> None:
        self.rollbacks += 1


def test_a_reader_does_not_block_a_writer_on_sqlite(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    with session_scope(sqlite_url, read_only=True) as reader:
        assert reader.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar_one() == 1
        # Another connection takes the write lock at once (no busy wait at all), commits,
        # and the reader keeps its snapshot.
        writer = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            writer.execute("BEGIN IMMEDIATE")
            writer.execute(f"INSERT INTO {TABLE} VALUES (2)")
            writer.execute("COMMIT")
        finally:
            writer.close()
        with session_scope(sqlite_url) as other:  # novaq's own writer too
            other.execute(text(f"INSERT INTO {TABLE} VALUES (3)"))
        assert reader.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar_one() == 1
    assert _rows(sqlite_url) == [1, 2, 3]


def test_a_writer_still_takes_the_write_lock_at_begin_on_sqlite(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    with session_scope(sqlite_url):
        other = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()


def test_a_sql_write_in_a_reader_fails_clearly_and_changes_nothing(url: str) -> None:
    with (
        pytest.raises(ReadOnlyTransactionError, match="read-only transaction may not write"),
        session_scope(url, read_only=True) as session,
    ):
        session.execute(text(f"INSERT INTO {TABLE} VALUES (7)"))
    assert _rows(url) == [1]


def test_an_orm_write_in_a_reader_fails_clearly_and_changes_nothing(url: str) -> None:
    refused = pytest.raises(ReadOnlyTransactionError, match="_Probe")
    with refused, session_scope(url, read_only=True) as session:
        session.add(_Probe(n=8))  # flushed at the end: refused, not dropped
    with pytest.raises(ReadOnlyTransactionError), session_scope(url, read_only=True) as session:
        session.add(_Probe(n=9))
        session.execute(text(f"SELECT n FROM {TABLE}"))  # the autoflush is refused
    assert _rows(url) == [1]


def test_the_error_is_not_taken_for_an_unavailable_database(url: str) -> None:
    refused = pytest.raises(ReadOnlyTransactionError)
    with refused as caught, session_scope(url, read_only=True) as session:
        session.execute(text(f"DELETE FROM {TABLE}"))
    assert not isinstance(caught.value, DatabaseUnavailable)


def test_a_reader_commits_nothing_and_a_writer_writes_after_it(url: str) -> None:
    ends, reader_ends = _Ends(get_engine(url)), _Ends(reader_engine(url))
    for _ in range(3):
        assert _rows(url) == [1]
    if reader_engine(url) is get_engine(url):  # PostgreSQL: READ ONLY transactions
        assert (ends.commits, ends.rollbacks) == (0, 3)
    else:  # SQLite: the readers' engine of their own
        assert (ends.commits, ends.rollbacks, reader_ends.commits) == (0, 0, 0)
        assert reader_ends.rollbacks == 3
    with session_scope(url) as session:
        session.execute(text(f"INSERT INTO {TABLE} VALUES (2)"))
    assert _rows(url) == [1, 2]
    assert ends.commits == 1


def test_a_sqlite_readers_connection_stays_query_only_and_keeps_its_statements(
    sqlite_url: str,
) -> None:
    """Nothing toggles ``query_only`` around a reader's transaction: turning a flag pragma
    on or off makes SQLite expire every statement the connection had prepared."""
    ran: list[str] = []
    event.listen(reader_engine(sqlite_url), "before_cursor_execute", lambda *a: ran.append(a[2]))
    for _ in range(3):
        with session_scope(sqlite_url, read_only=True) as session:
            raw = session.connection().connection.driver_connection
            assert raw.execute("PRAGMA query_only").fetchone() == (1,)
            session.execute(text(f"SELECT n FROM {TABLE}")).all()
    assert not [sql for sql in ran if "PRAGMA" in sql.upper()]
    with session_scope(sqlite_url) as writer:  # the writers' connections are not query_only
        raw = writer.connection().connection.driver_connection
        assert raw.execute("PRAGMA query_only").fetchone() == (0,)


def test_rows_read_stay_loaded_after_the_reader_ends(url: str) -> None:
    with session_scope(url, read_only=True) as session:
        probe = session.get(_Probe, 1)
    assert probe is not None and probe.n == 1  # no DetachedInstanceError


def test_a_reader_combines_with_a_snapshot(url: str) -> None:
    with session_scope(url, read_only=True, snapshot=True) as session:
        first = session.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar_one()
        with session_scope(url) as other:
            other.execute(text(f"INSERT INTO {TABLE} VALUES (2)"))
        assert session.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar_one() == first
        # The statement itself raises the clear error (a caller may catch it inside).
        with pytest.raises(ReadOnlyTransactionError):
            session.execute(text(f"INSERT INTO {TABLE} VALUES (3)"))
        session.rollback()
    assert _rows(url) == [1, 2]


def test_postgresql_reader_is_a_read_only_transaction_and_the_pool_resets_it(
    pg_url: str,
) -> None:
    with session_scope(pg_url, read_only=True, snapshot=True) as session:
        assert session.execute(text("SHOW transaction_read_only")).scalar_one() == "on"
        assert session.execute(text("SHOW transaction_isolation")).scalar_one() == "repeatable read"
    with session_scope(pg_url) as session:
        assert session.execute(text("SHOW transaction_read_only")).scalar_one() == "off"
        assert session.execute(text("SHOW transaction_isolation")).scalar_one() == "read committed"


def test_the_sessions_factories_take_read_only(sqlite_url: str) -> None:
    with (
        sessions_for(sqlite_url)(read_only=True) as session,
        pytest.raises(ReadOnlyTransactionError),
    ):
        session.execute(text(f"INSERT INTO {TABLE} VALUES (5)"))
    with sessions_for(sqlite_url)() as session:  # a writer, as every existing caller
        session.execute(text(f"INSERT INTO {TABLE} VALUES (6)"))
    engine = create_engine(sqlite_url)
    try:
        with engine.connect() as conn, conn.begin():
            outer = _session_on(conn)
            # The tests' savepoints accept read_only and ignore it.
            with savepoints(outer)(read_only=True) as session:
                session.execute(text(f"INSERT INTO {TABLE} VALUES (7)"))
            assert outer.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar_one() == 3
            outer.close()
    finally:
        engine.dispose()
    assert _rows(sqlite_url) == [1, 6]


def _session_on(conn: object) -> object:
    from sqlalchemy.orm import Session

    return Session(bind=conn, join_transaction_mode="create_savepoint")  # type: ignore[arg-type]
