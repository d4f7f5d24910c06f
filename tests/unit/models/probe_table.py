"""A probe table for the model tests that run on SQLite and PostgreSQL: ``n int PRIMARY
KEY`` holding one row, ``n = 1``, made afresh in a test's own database."""

from __future__ import annotations

from sqlalchemy import text

from models.db import session_scope


def create_probe_table(url: str, table: str) -> str:
    """``table`` in ``url``'s database, with its one row; returns ``url``."""
    with session_scope(url) as session:
        session.execute(text(f"DROP TABLE IF EXISTS {table}"))
        session.execute(text(f"CREATE TABLE {table} (n int PRIMARY KEY)"))
        session.execute(text(f"INSERT INTO {table} VALUES (1)"))
    return url


def probe_rows(url: str, table: str) -> list[int]:
    """The ``n`` of every row of ``table``, in order, read in a reader's transaction."""
    with session_scope(url, read_only=True) as session:
        return list(session.scalars(text(f"SELECT n FROM {table} ORDER BY n")))
