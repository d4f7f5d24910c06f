"""The Core ``Table`` of a mapped class, for statements built on the table rather than the
class (the same SQL without the ORM's bulk-persistence pass on hot paths)."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table

from models.base import Base


def table_of(model: type[Base]) -> Table:
    """``model.__table__`` typed as the ``Table`` it is (the declarative base types it as
    a ``FromClause``)."""
    return cast(Table, model.__table__)
