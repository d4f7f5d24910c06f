"""``task_deliveries``: how many times each in-flight step was delivered, so a message
that keeps killing its worker is given up after a bound instead of looping forever
(``task_reject_on_worker_lost`` requeues without a limit: celery/celery#9082)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp


class TaskDelivery(Base):
    __tablename__ = "task_deliveries"
    __table_args__ = (UniqueConstraint("task_id", "task_name"),)

    id: Mapped[intpk]
    task_id: Mapped[str] = mapped_column(String(255))
    task_name: Mapped[str] = mapped_column(String(255))
    attempts: Mapped[int] = mapped_column(default=1)
    first_at: Mapped[timestamp]
    last_at: Mapped[dt.datetime | None]
    #: The Celery node running it (``compute@host1``) and that node's host: the reaper
    #: knows the delivery's owner is gone when the host's service is down, or when a new
    #: worker of the same node started (``orphaned_at``).
    worker: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str | None] = mapped_column(String(255))
    orphaned_at: Mapped[dt.datetime | None]
