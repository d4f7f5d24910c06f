"""service liveness apart: services.report_count and last_seen_up move to
service_liveness (on SQLite a database file of its own, ``<database>-liveness``)

A heartbeat writes only there, so on SQLite it never waits for the main database's write
lock (``models.liveness``). The values carry over. On SQLite the file and its table are
made by the engine that runs this migration (every connection of the main engines
attaches the file, making it when missing: ``models.db._attach_liveness``), so only the
rows are copied here; elsewhere the table is made here, in the same database.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

from models.liveness import SCHEMA, sqlite_file

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_SERVICES = sa.table(
    "services",
    sa.column("id", sa.Integer()),
    sa.column("report_count", sa.Integer()),
    sa.column("last_seen_up", sa.DateTime()),
)


def _liveness(dialect: str) -> sa.TableClause:
    """The table: on SQLite in the attached liveness file (schema ``liveness``)."""
    return sa.table(
        "service_liveness",
        sa.column("service_id", sa.Integer()),
        sa.column("report_count", sa.Integer()),
        sa.column("last_seen_up", sa.DateTime()),
        schema=SCHEMA if dialect == "sqlite" else None,
    )


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        _copy_to_the_sqlite_file(bind)
    else:
        op.create_table(
            "service_liveness",
            sa.Column("service_id", sa.Integer(), autoincrement=False, nullable=False),
            sa.Column("report_count", sa.Integer(), nullable=False),
            sa.Column("last_seen_up", sa.DateTime(), nullable=True),
            sa.PrimaryKeyConstraint("service_id", name=op.f("pk_service_liveness")),
        )
        op.execute(
            sa.insert(_liveness(bind.dialect.name)).from_select(
                ["service_id", "report_count", "last_seen_up"],
                sa.select(_SERVICES.c.id, _SERVICES.c.report_count, _SERVICES.c.last_seen_up),
            )
        )
    with op.batch_alter_table("services") as batch:
        batch.drop_column("last_seen_up")
        batch.drop_column("report_count")


def _copy_to_the_sqlite_file(bind: sa.Connection) -> None:
    path = sqlite_file(bind.engine.url.database)
    rows = bind.exec_driver_sql("SELECT id, report_count, last_seen_up FROM services").all()
    if path is None or not rows:
        return
    # (the engine attached the file read-only: written on a connection of its own)
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT OR REPLACE INTO service_liveness (service_id, report_count, last_seen_up)"
            " VALUES (?, ?, ?)",
            [tuple(row) for row in rows],
        )
        conn.execute("COMMIT")
    finally:
        conn.close()


def downgrade() -> None:
    with op.batch_alter_table("services") as batch:
        batch.add_column(
            sa.Column("report_count", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("last_seen_up", sa.DateTime(), nullable=True))
    dialect = op.get_bind().dialect.name
    live = _liveness(dialect)
    of_service = live.c.service_id == _SERVICES.c.id
    op.execute(
        _SERVICES.update().values(
            report_count=sa.func.coalesce(
                sa.select(live.c.report_count).where(of_service).scalar_subquery(), 0
            ),
            last_seen_up=sa.select(live.c.last_seen_up).where(of_service).scalar_subquery(),
        )
    )
    with op.batch_alter_table("services") as batch:
        batch.alter_column("report_count", server_default=None)
    if dialect != "sqlite":
        op.drop_table("service_liveness")
    # (on SQLite the liveness file stays, as the engines remake it anyway)
