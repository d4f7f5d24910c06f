"""``service_liveness``: what a service's heartbeat writes (Nova's ``report_count`` and
``last_seen_up``), apart from its ``services`` row.

On SQLite the table lives in a database file of its own beside the main one
(``<database>-liveness``, WAL, private like the main file), with its own write lock: a
heartbeat writes there only, so it never waits for the main database's lock, which the
workers' transactions hold most of the time under load. Every connection of the main
database's engines attaches that file read-only as schema ``liveness`` (``models.db``),
so one statement still joins ``services`` to its liveness. NOTE: SQLite's ``BEGIN
IMMEDIATE`` takes a *read* transaction, not the write lock, on a database attached
read-only, so a writer of the main database never holds up a heartbeat either.

On PostgreSQL and MariaDB, which have no database-wide write lock, the table is an
ordinary one in the same database (Alembic's), the schema name translated away
(``SCHEMA_TRANSLATE``). ``forced_down`` stays a column of ``services``: an operator's
write, not liveness.
"""

from __future__ import annotations

import datetime as dt
from typing import cast

from sqlalchemy import MetaData, Table
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.schema import CreateTable

from models.base import Base

#: The schema (SQLite: the attached database's name) the liveness table is in.
SCHEMA = "liveness"
#: The engines' ``schema_translate_map`` wherever the table is in the main schema: every
#: database but SQLite's main file, and SQLite's liveness file itself.
SCHEMA_TRANSLATE: dict[str | None, str | None] = {SCHEMA: None}


class ServiceLiveness(Base):
    __tablename__ = "service_liveness"
    __table_args__ = {"schema": SCHEMA}

    #: ``services.id`` (no foreign key: on SQLite the two are in different files).
    service_id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    report_count: Mapped[int] = mapped_column(default=0)
    last_seen_up: Mapped[dt.datetime | None]

    def __repr__(self) -> str:
        return f"<ServiceLiveness {self.service_id} reports={self.report_count}>"


def sqlite_file(database: str | None) -> str | None:
    """The liveness file of SQLite database file ``database`` (None: an in-memory one)."""
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return f"{database}-liveness"


#: The liveness file's table, compiled once from the model (``models.db`` makes the file).
CREATE_SQLITE = str(
    CreateTable(
        cast(Table, ServiceLiveness.__table__).to_metadata(MetaData(), schema=None),  # type: ignore[arg-type]
        if_not_exists=True,
    ).compile(dialect=sqlite_dialect.dialect())
)
