"""``task_log``: one row per (task, host, period) of a once-per-period job, so the job runs
once per period whatever the spacing (Nova's ``instance_usage_audit``)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp


class TaskLog(Base):
    __tablename__ = "task_log"
    __table_args__ = (UniqueConstraint("task_name", "host", "period_beginning", "period_ending"),)

    id: Mapped[intpk]
    task_name: Mapped[str] = mapped_column(String(255))
    # "RUNNING" then "DONE"
    state: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    period_beginning: Mapped[dt.datetime]
    period_ending: Mapped[dt.datetime]
    message: Mapped[str] = mapped_column(Text, default="")
    task_items: Mapped[int] = mapped_column(default=0)
    errors: Mapped[int] = mapped_column(default=0)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
