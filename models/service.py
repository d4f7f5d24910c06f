"""``services``: one row per novaq process that reports in (compute hosts, schedulers)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, str255, timestamp


class Service(Base):
    __tablename__ = "services"
    __table_args__ = (UniqueConstraint("host", "binary", "deleted"),)

    id: Mapped[intpk]
    host: Mapped[str255]
    binary: Mapped[str] = mapped_column(String(64))
    topic: Mapped[str | None] = mapped_column(String(255))
    report_count: Mapped[int] = mapped_column(default=0)
    last_seen_up: Mapped[dt.datetime | None]
    disabled: Mapped[bool] = mapped_column(default=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    forced_down: Mapped[bool] = mapped_column(default=False)
    version: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)

    def __repr__(self) -> str:
        return f"<Service {self.binary}@{self.host} reports={self.report_count}>"
