"""Declarative base, naming convention and the column aliases every model shares.

No business logic lives in the models: they are typed rows. Queries live in the domain
modules (``compute/``, ``scheduler/``, ``workflows/``).
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from sqlalchemy import JSON, DateTime, MetaData, String
from sqlalchemy.orm import DeclarativeBase, mapped_column
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> dt.datetime:
    """Naive UTC, as Nova stores it (portable across SQLite, PostgreSQL and MariaDB)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class UTCDateTime(TypeDecorator[dt.datetime]):
    """Stores naive UTC; accepts aware datetimes and converts them."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Any) -> dt.datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value


intpk = Annotated[int, mapped_column(primary_key=True, autoincrement=True)]
uuid36 = Annotated[str, mapped_column(String(36))]
str255 = Annotated[str, mapped_column(String(255))]
timestamp = Annotated[dt.datetime, mapped_column(UTCDateTime, default=utcnow)]
json_dict = Annotated[dict[str, Any], mapped_column(JSON, default=dict)]


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dt.datetime: UTCDateTime, dict[str, Any]: JSON}
