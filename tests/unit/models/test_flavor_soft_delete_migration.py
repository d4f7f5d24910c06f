"""Migration 0013 (flavor soft delete, private flavors) both ways, with data: an
upgraded database keeps its flavors public and live; a downgrade keeps a deleted flavor
(servers refer to it) hidden, its name free for the live one."""

from __future__ import annotations

import importlib
from pathlib import Path

from sqlalchemy import text

from models.db import get_engine
from models.migrate import downgrade, upgrade
from tests.unit.models.migration_data import database_at

MIGRATION = importlib.import_module("models.migrations.versions.0013_flavor_delete_and_access")
INSERT = (
    "INSERT INTO flavors (id, flavorid, name, vcpus, memory_mb, root_gb, ephemeral_gb, swap,"
    " disabled, created_at) VALUES (:id, :fid, :name, 1, 512, 1, 0, 0, false, '2026-01-01')"
)


def test_upgrade_keeps_old_flavors_public_and_live(tmp_path: Path) -> None:
    flavor = (INSERT, {"id": 1, "fid": "f1", "name": "m1"})
    url = database_at(tmp_path / "up.sqlite", MIGRATION.down_revision, flavor)
    upgrade(url, MIGRATION.revision)
    with get_engine(url).connect() as conn:
        row = conn.execute(text("SELECT is_public, deleted FROM flavors")).one()
    assert tuple(row) == (1, 0)


def test_downgrade_hides_a_deleted_flavor_and_frees_its_name(tmp_path: Path) -> None:
    url = database_at(
        tmp_path / "down.sqlite",
        MIGRATION.revision,
        (INSERT, {"id": 1, "fid": "f1", "name": "m1"}),
        "UPDATE flavors SET deleted = id WHERE id = 1",
        (INSERT, {"id": 2, "fid": "f2", "name": "m1"}),
    )
    downgrade(url, MIGRATION.down_revision)
    with get_engine(url).connect() as conn:
        rows = conn.execute(text("SELECT id, name, flavorid, disabled FROM flavors ORDER BY id"))
        assert [tuple(r) for r in rows] == [(1, "deleted-1", "deleted-1", 1), (2, "m1", "f2", 0)]
