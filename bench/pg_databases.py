"""Throwaway PostgreSQL databases for the benchmarks, on the local server (trust auth,
user postgres; the admin connection goes to its ``test`` database)."""

from __future__ import annotations

from sqlalchemy import create_engine, text

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _admin(statement: str) -> None:
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(statement))
    admin.dispose()


def pg_url(name: str) -> str:
    """A new, empty database ``name`` (dropped first if it exists); its URL."""
    drop_pg(name)
    _admin(f'CREATE DATABASE "{name}"')
    return f"postgresql://postgres@127.0.0.1:5432/{name}"


def drop_pg(name: str) -> None:
    _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
