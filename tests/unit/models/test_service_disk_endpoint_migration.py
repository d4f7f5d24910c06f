"""Migration 0021 (``services.disk_endpoint``) both ways, with a service row that keeps
its data, on SQLite and PostgreSQL."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from models.db import dispose_all, get_engine
from models.migrate import downgrade, upgrade
from tests.unit.models.migration_data import database_at

MIGRATION = importlib.import_module("models.migrations.versions.0021_service_disk_endpoint")
SERVICE = (
    'INSERT INTO services (id, host, "binary", topic, disabled, forced_down, version,'
    " created_at, deleted) VALUES (7, 'h1', 'novaq-compute', 'compute.h1', false, false, 1,"
    " '2026-01-01', 0)"
)
URL = "http://10.0.0.5:41234"


def _columns(url: str) -> set[str]:
    with get_engine(url).connect() as conn:
        return {c["name"] for c in inspect(conn).get_columns("services")}


def _round_trip(url: str) -> None:
    upgrade(url, MIGRATION.revision)
    with get_engine(url).begin() as conn:
        conn.execute(text("UPDATE services SET disk_endpoint = :u WHERE id = 7"), {"u": URL})
        assert conn.execute(text("SELECT host, disk_endpoint FROM services")).one() == ("h1", URL)
    downgrade(url, MIGRATION.down_revision)
    assert "disk_endpoint" not in _columns(url)
    with get_engine(url).connect() as conn:
        assert conn.execute(text("SELECT host, topic FROM services")).one() == ("h1", "compute.h1")
    upgrade(url, MIGRATION.revision)
    with get_engine(url).connect() as conn:
        assert conn.execute(text("SELECT disk_endpoint FROM services")).scalar_one() is None


@pytest.fixture
def sqlite_at_0020(tmp_path: Path) -> Iterator[str]:
    yield database_at(tmp_path / "up.sqlite", MIGRATION.down_revision, SERVICE)
    dispose_all()


def test_the_column_comes_and_goes_with_the_rows_kept_on_sqlite(sqlite_at_0020: str) -> None:
    _round_trip(sqlite_at_0020)


def test_the_column_comes_and_goes_with_the_rows_kept_on_postgresql(empty_pg_url: str) -> None:
    upgrade(empty_pg_url, MIGRATION.down_revision)
    with get_engine(empty_pg_url).begin() as conn:
        conn.execute(text(SERVICE))
    _round_trip(empty_pg_url)
