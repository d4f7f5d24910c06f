"""Periodic maintenance bookkeeping: one ``periodic_task_runs`` row per (task, host) that
says whether a run is in progress (the no-overlap lease) and how the last one went, and
``beat_leases``, the lease that keeps celery beat a singleton."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk


class PeriodicTaskRun(Base):
    __tablename__ = "periodic_task_runs"
    __table_args__ = (UniqueConstraint("task_name", "host"),)

    id: Mapped[intpk]
    # Nova's method name (``_sync_power_states``); host is the compute host, or
    # ``cluster`` for a task that runs once for the whole cluster.
    task_name: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    # Set while a run holds the lease; a run finding it set (and not stale) skips.
    running_since: Mapped[dt.datetime | None]
    runner: Mapped[str | None] = mapped_column(String(255))
    last_started_at: Mapped[dt.datetime | None]
    last_finished_at: Mapped[dt.datetime | None]
    # "ok", "error", "skipped" (gate closed or overlap)
    last_status: Mapped[str | None] = mapped_column(String(32))
    last_result: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    last_error: Mapped[str | None] = mapped_column(Text)
    run_count: Mapped[int] = mapped_column(default=0)
    skip_count: Mapped[int] = mapped_column(default=0)

    def __repr__(self) -> str:
        return f"<PeriodicTaskRun {self.task_name}@{self.host} {self.last_status}>"


class BeatLease(Base):
    __tablename__ = "beat_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    acquired_at: Mapped[dt.datetime]
    expires_at: Mapped[dt.datetime]
