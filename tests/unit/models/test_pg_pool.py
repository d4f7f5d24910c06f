"""A PostgreSQL engine's pool hands out the connection checked in last (``pool_use_lifo``,
``models.db._make_engine``): a process's statements then run on few connections, so each
reaches psycopg's prepare threshold (its sixth execution on a connection) and the server
stops parsing and planning it (issue 16: the server's CPU per boot)."""

from __future__ import annotations

from sqlalchemy import text

from models.db import get_engine

#: psycopg prepares a statement at its sixth execution on a connection (prepare_threshold 5).
PREPARED_AFTER = 6


def _backend(conn: object) -> int:
    return int(conn.connection.dbapi_connection.info.backend_pid)  # type: ignore[attr-defined]


def test_a_checkout_takes_the_connection_checked_in_last(migrated_pg_url: str) -> None:
    engine = get_engine(migrated_pg_url)
    first, second = engine.connect(), engine.connect()
    backends = [_backend(first), _backend(second)]
    first.close()
    second.close()  # checked in last
    with engine.connect() as again:
        assert _backend(again) == backends[1]


def test_a_statement_run_one_call_after_another_is_prepared(migrated_pg_url: str) -> None:
    """One caller after another (each its own checkout and transaction, as steps and API
    calls are) runs the statement on one connection, which prepares it. (A rolled-back
    transaction would drop every statement psycopg prepared on it.)"""
    engine = get_engine(migrated_pg_url)
    with engine.connect(), engine.connect():  # two connections in the pool (or more)
        pass
    statement = text("SELECT count(*) FROM flavors WHERE memory_mb > :mb")
    for _ in range(PREPARED_AFTER):
        with engine.begin() as conn:  # committed, as the steps' transactions are
            conn.execute(statement, {"mb": 1})
    with engine.connect() as conn:
        prepared = conn.execute(
            text("SELECT statement FROM pg_prepared_statements WHERE statement LIKE :s"),
            {"s": "SELECT count(*) FROM flavors WHERE memory_mb > %"},
        ).all()
    assert len(prepared) == 1
