"""Migration 0015 (a server's project, user and os_type) both ways, with data: the
servers a database already has get the demo project and user, and no os_type."""

from __future__ import annotations

import importlib
from pathlib import Path

from sqlalchemy import text

from models.db import get_engine
from models.instance import DEFAULT_PROJECT_ID, DEFAULT_USER_ID
from models.migrate import downgrade, upgrade
from tests.unit.models.migration_data import database_at

MIGRATION = importlib.import_module("models.migrations.versions.0015_instance_project_user_os_type")
FLAVOR = (
    "INSERT INTO flavors (id, flavorid, name, vcpus, memory_mb, root_gb, ephemeral_gb, swap,"
    " disabled, created_at) VALUES (1, 'f1', 'm1', 1, 512, 1, 0, 0, false, '2026-01-01')"
)
INSTANCE = (
    "INSERT INTO instances (id, uuid, display_name, flavor_id, flavor, image_ref, vcpus,"
    " memory_mb, root_gb, ephemeral_gb, vm_state, power_state, request_spec, system_metadata,"
    " created_at, deleted) VALUES (1, '00000000-0000-4000-8000-000000000001', 'web', 1, '{}',"
    " '', 1, 512, 1, 0, 'active', 1, '{}', '{}', '2026-01-01', 0)"
)


def test_upgrade_gives_existing_servers_the_demo_project_and_user(tmp_path: Path) -> None:
    url = database_at(tmp_path / "up.sqlite", MIGRATION.down_revision, FLAVOR, INSTANCE)
    upgrade(url, MIGRATION.revision)
    with get_engine(url).connect() as conn:
        row = conn.execute(text("SELECT project_id, user_id, os_type FROM instances")).one()
    assert tuple(row) == (DEFAULT_PROJECT_ID, DEFAULT_USER_ID, None)
    assert DEFAULT_PROJECT_ID == "demo"


def test_downgrade_drops_the_columns_and_keeps_the_servers(tmp_path: Path) -> None:
    url = database_at(tmp_path / "down.sqlite", MIGRATION.revision, FLAVOR, INSTANCE)
    downgrade(url, MIGRATION.down_revision)
    with get_engine(url).connect() as conn:
        columns = {r[1] for r in conn.execute(text("PRAGMA table_info(instances)"))}
        count = conn.execute(text("SELECT count(*) FROM instances")).scalar()
    assert not {"project_id", "user_id", "os_type"} & columns
    assert count == 1
