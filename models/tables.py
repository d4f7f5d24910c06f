"""The Core ``Table`` of a mapped class, for statements built on the table rather than the
class (the same SQL without the ORM's bulk-persistence pass on hot paths)."""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import ColumnElement, Table, bindparam

from models.base import Base


def table_of(model: type[Base]) -> Table:
    """``model.__table__`` typed as the ``Table`` it is (the declarative base types it as
    a ``FromClause``)."""
    return cast(Table, model.__table__)


def one_or_in(column: Any, name: str, single: bool) -> ColumnElement[bool]:
    """``column`` matched against the bound parameter ``name``: ``=`` one value when
    ``single``, else an expanding ``IN`` of a list. For statements built once per shape:
    an expanding ``IN`` is rendered again at every execution (about 30 us), which a step
    acting on one instance need not pay."""
    if single:
        return cast(ColumnElement[bool], column == bindparam(name, type_=column.type))
    return cast(ColumnElement[bool], column.in_(bindparam(name, expanding=True)))
