"""Migration 0020 (services' liveness apart) both ways, with data: a service's
``report_count`` and ``last_seen_up`` carry over to ``service_liveness`` (on SQLite the
liveness file) and back."""

from __future__ import annotations

import datetime as dt
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select, text

from models import Service
from models.db import dispose_all, get_engine, session_scope
from models.migrate import downgrade, upgrade
from tests.unit.models.migration_data import database_at

MIGRATION = importlib.import_module("models.migrations.versions.0020_service_liveness")
SERVICE = (
    'INSERT INTO services (id, host, "binary", topic, report_count, last_seen_up, disabled,'
    " forced_down, version, created_at, deleted) VALUES (7, 'h1', 'novaq-compute', 'compute.h1',"
    " 41, '2026-11-01 12:00:00', false, false, 1, '2026-01-01', 0)"
)


@pytest.fixture
def sqlite_at_0019(tmp_path: Path) -> Iterator[str]:
    yield database_at(tmp_path / "up.sqlite", MIGRATION.down_revision, SERVICE)
    dispose_all()


def _liveness_of_service_7(url: str) -> tuple[int, dt.datetime | None]:
    # NOTE: the two columns only, not the whole row: later migrations add columns to
    # ``services`` that the model has and a database at 0020 has not.
    with session_scope(url, read_only=True) as session:
        query = select(Service.report_count, Service.last_seen_up).where(Service.id == 7)
        count, seen = session.execute(query).one()
        return count, seen


def test_upgrade_carries_the_liveness_over_on_sqlite(sqlite_at_0019: str) -> None:
    upgrade(sqlite_at_0019, MIGRATION.revision)
    assert _liveness_of_service_7(sqlite_at_0019) == (41, dt.datetime(2026, 11, 1, 12))
    with get_engine(sqlite_at_0019).connect() as conn:
        columns = {r[1] for r in conn.execute(text("PRAGMA table_info(services)"))}
    assert not {"report_count", "last_seen_up"} & columns


def test_downgrade_carries_it_back_on_sqlite(sqlite_at_0019: str) -> None:
    upgrade(sqlite_at_0019, MIGRATION.revision)
    downgrade(sqlite_at_0019, MIGRATION.down_revision)
    with get_engine(sqlite_at_0019).connect() as conn:
        row = conn.execute(text("SELECT report_count, last_seen_up FROM services")).one()
    assert tuple(row) == (41, "2026-11-01 12:00:00")  # (as written: copied as stored)


def test_upgrade_carries_the_liveness_over_on_postgresql(empty_pg_url: str) -> None:
    upgrade(empty_pg_url, MIGRATION.down_revision)
    with get_engine(empty_pg_url).begin() as conn:
        conn.execute(text(SERVICE))
    upgrade(empty_pg_url, MIGRATION.revision)
    assert _liveness_of_service_7(empty_pg_url) == (41, dt.datetime(2026, 11, 1, 12))
    downgrade(empty_pg_url, MIGRATION.down_revision)
    with get_engine(empty_pg_url).connect() as conn:
        row = conn.execute(text("SELECT report_count, last_seen_up FROM services")).one()
    assert tuple(row) == (41, dt.datetime(2026, 11, 1, 12))
