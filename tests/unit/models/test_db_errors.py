"""The one classifier of transient database errors (``models.db.is_transient_error``) on
errors real drivers raise, and ``session_scope`` turning each of them into
``DatabaseUnavailable`` wherever it happens: the connect, a statement, the commit.

PostgreSQL cases use the local server (127.0.0.1:5432, user postgres) through a TCP
proxy of the test's own (``tests.tcp_proxy``) where they make it fail; they are skipped
when no server answers. The shared server itself is never stopped.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from models.db import is_transient_error, session_scope
from novaq.exceptions import DatabaseUnavailable, ServiceUnavailable
from tests.tcp_proxy import TcpProxy, free_port, reachable

PG = "postgresql://postgres@127.0.0.1:{port}/{db}"


needs_pg = pytest.mark.skipif(not reachable(5432), reason="no PostgreSQL on 127.0.0.1:5432")


def _error_of(url: str, sql: str = "SELECT 1") -> SQLAlchemyError:
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as conn:
            conn.execute(text(sql))
    except SQLAlchemyError as exc:
        return exc
    finally:
        engine.dispose()
    raise AssertionError(f"{sql} on {url} did not fail")


# -- the classifier --------------------------------------------------------------------


@needs_pg
@pytest.mark.parametrize(
    ("case", "url"),
    [
        ("connection refused", PG.format(port=free_port(), db="test")),
        ("database does not exist", PG.format(port=5432, db="novaq_no_such_database")),
    ],
    ids=["connection refused", "database does not exist"],  # the free port varies per run
)
def test_a_database_that_cannot_be_reached_is_transient(case: str, url: str) -> None:
    exc = _error_of(url)
    assert is_transient_error(exc), (case, exc)


@needs_pg
def test_a_server_that_closes_connections_is_transient(proxy: TcpProxy) -> None:
    proxy.hang_up()
    exc = _error_of(PG.format(port=proxy.port, db="test"))
    assert "server closed the connection" in str(exc)
    assert is_transient_error(exc)


@needs_pg
def test_a_connection_cut_mid_transaction_is_transient(proxy: TcpProxy) -> None:
    engine = create_engine(f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
            proxy.cut()
            with pytest.raises(SQLAlchemyError) as caught:
                conn.execute(text("SELECT 2"))
    finally:
        engine.dispose()
    assert is_transient_error(caught.value)


@needs_pg
def test_a_backend_terminated_by_the_administrator_is_transient() -> None:
    engine = create_engine("postgresql+psycopg://postgres@127.0.0.1:5432/test")
    admin = create_engine(
        "postgresql+psycopg://postgres@127.0.0.1:5432/test", isolation_level="AUTOCOMMIT"
    )
    try:
        with engine.connect() as conn:
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar()
            with admin.connect() as other:
                other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            with pytest.raises(SQLAlchemyError) as caught:
                conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()
        admin.dispose()
    assert getattr(caught.value.orig, "sqlstate", None) == "57P01"  # type: ignore[attr-defined]
    assert is_transient_error(caught.value)


@needs_pg
@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM novaq_no_such_table",  # relation ... does not exist: a bug, not an outage
        "SELEC 1",
        "SELECT 1/0",
    ],
)
def test_errors_of_the_request_are_not_transient(sql: str) -> None:
    assert not is_transient_error(_error_of(PG.format(port=5432, db="test"), sql))


def test_a_mysql_server_that_cannot_be_reached_is_transient() -> None:
    exc = _error_of(f"mysql+pymysql://root@127.0.0.1:{free_port()}/novaq")
    assert exc.orig.args[0] == 2003  # type: ignore[union-attr]  # CR_CONN_HOST_ERROR
    assert is_transient_error(exc)


def test_sqlite_locked_by_another_writer_is_transient(tmp_path: Path) -> None:
    path = tmp_path / "locked.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    try:
        with pytest.raises(SQLAlchemyError) as caught, engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (1)"))
    finally:
        engine.dispose()
        holder.close()
    assert "database is locked" in str(caught.value)
    assert is_transient_error(caught.value)


def test_sqlite_file_that_cannot_be_opened_is_transient(tmp_path: Path) -> None:
    assert is_transient_error(_error_of(f"sqlite:///{tmp_path}/missing/dir/x.sqlite"))


def test_an_integrity_error_quoting_an_outage_is_not_transient(tmp_path: Path) -> None:
    """Only the driver's message counts, never the SQL's parameters (a fault row may quote
    "connection refused")."""
    engine = create_engine(f"sqlite:///{tmp_path}/x.sqlite")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x TEXT UNIQUE)"))
            conn.execute(text("INSERT INTO t VALUES ('connection refused')"))
        with pytest.raises(IntegrityError) as caught, engine.begin() as conn:
            conn.execute(text("INSERT INTO t VALUES (:x)"), {"x": "connection refused"})
    finally:
        engine.dispose()
    assert "connection refused" in str(caught.value)
    assert not is_transient_error(caught.value)


# -- session_scope: every such error is DatabaseUnavailable ------------------------------


@needs_pg
def test_session_scope_raises_database_unavailable_for_a_refused_connect() -> None:
    with (
        pytest.raises(DatabaseUnavailable, match="database is unavailable.*refused"),
        session_scope(PG.format(port=free_port(), db="test")) as session,
    ):
        session.execute(text("SELECT 1"))


@needs_pg
def test_session_scope_raises_database_unavailable_for_a_missing_database() -> None:
    with (
        pytest.raises(ServiceUnavailable, match='database "novaq_gone" does not exist'),
        session_scope(PG.format(port=5432, db="novaq_gone")),
    ):
        pass


@needs_pg
def test_session_scope_translates_a_commit_on_a_lost_connection(proxy: TcpProxy) -> None:
    url = PG.format(port=proxy.port, db="test")
    with (
        pytest.raises(DatabaseUnavailable, match="server closed the connection"),
        session_scope(url) as session,
    ):
        session.execute(text("CREATE TEMPORARY TABLE novaq_t (x INTEGER)"))
        proxy.cut()  # the commit, and then the rollback, meet a dead connection
    with session_scope(url) as session:  # the pool recovers once the server answers
        assert session.execute(text("SELECT 1")).scalar() == 1


@needs_pg
def test_session_scope_translates_a_statement_cut_mid_transaction(proxy: TcpProxy) -> None:
    url = PG.format(port=proxy.port, db="test")
    with session_scope(url) as session:
        session.execute(text("SELECT 1"))
    with pytest.raises(DatabaseUnavailable), session_scope(url) as session:
        proxy.refuse()
        session.execute(text("SELECT 2"))
    proxy.restore()
    with session_scope(url) as session:
        assert session.execute(text("SELECT 3")).scalar() == 3


def test_session_scope_leaves_other_errors_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/other.sqlite"
    with pytest.raises(SQLAlchemyError) as caught, session_scope(url) as session:
        session.execute(text("SELECT * FROM no_such_table"))
    assert not isinstance(caught.value, DatabaseUnavailable)


def test_session_scope_raises_what_an_after_commit_listener_raised(tmp_path: Path) -> None:
    """The commit went through and a listener of it failed: the caller sees that error
    (an availability error as ``DatabaseUnavailable``, to be waited out), not the
    ``InvalidRequestError`` a rollback of the committed transaction raises, and what
    committed stays."""
    url = f"sqlite:///{tmp_path}/listener.sqlite"
    with session_scope(url) as session:
        session.execute(text("CREATE TABLE t (a INTEGER)"))

    def report(_session: object) -> None:
        raise DatabaseUnavailable(reason="the report's database is locked")

    with pytest.raises(DatabaseUnavailable), session_scope(url) as session:
        session.execute(text("INSERT INTO t VALUES (1)"))
        event.listen(session, "after_commit", report, once=True)
    with session_scope(url) as session:
        assert session.execute(text("SELECT count(*) FROM t")).scalar() == 1
