from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from models import Base
from models.db import get_engine
from models.migrate import current, downgrade, upgrade


def test_migrations_produce_exactly_the_models_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'schema.sqlite'}"
    upgrade(url)
    assert current(url) is not None
    with get_engine(url).connect() as conn:
        # (the liveness table's schema is the liveness file, attached: models.liveness)
        context = MigrationContext.configure(conn, opts={"include_schemas": True})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


def test_downgrade_to_base_removes_every_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'down.sqlite'}"
    upgrade(url)
    downgrade(url, "base")
    with get_engine(url).connect() as conn:
        tables = conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type='table'").all()
    assert [t for (t,) in tables if t != "alembic_version"] == []
