"""Apply or inspect novaq's schema with Alembic (``novaq db upgrade``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Bring the database at ``url`` (SQLite, PostgreSQL or MariaDB) up to ``revision``."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    from alembic.runtime.migration import MigrationContext

    from models.db import get_engine

    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
