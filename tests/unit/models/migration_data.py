"""A SQLite database migrated to one revision and holding rows written at it, for the
tests of one migration both ways with data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import text

from models.db import get_engine
from models.migrate import upgrade


def database_at(path: Path, revision: str, *rows: str | tuple[str, dict[str, Any]]) -> str:
    """A database at ``path`` upgraded to ``revision``, then ``rows`` (SQL, or SQL with
    its parameters) run there in one transaction; its URL."""
    url = f"sqlite:///{path}"
    upgrade(url, revision)
    with get_engine(url).begin() as conn:
        for row in rows:
            statement, params = (row, {}) if isinstance(row, str) else row
            conn.execute(text(statement), params)
    return url
