"""``host_mappings``: which cell a compute host belongs to (Nova's API database table,
filled by ``discover_hosts``). novaq has one cell, ``cell1``."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp

DEFAULT_CELL = "cell1"


class HostMapping(Base):
    __tablename__ = "host_mappings"

    id: Mapped[intpk]
    host: Mapped[str] = mapped_column(String(255), unique=True)
    cell_name: Mapped[str] = mapped_column(String(255), default=DEFAULT_CELL)
    created_at: Mapped[timestamp]
