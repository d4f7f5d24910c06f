"""``step_records``: one row per step of a server's operation and instance it acts on,
so an operator can read the whole workflow afterwards (``workflows.api.timeline``): which
queue and worker ran it, under which Celery task id, when, how it ended, how many times
it was delivered, and the server's states before and after it.

Written by ``tasks.base.NovaqTask`` in the transactions a step already opens (its
delivery count as it starts, its delivery's removal as it returns): no commit of its own.
Unlike ``task_deliveries`` the row stays once the step has returned.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum

from sqlalchemy import Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, str255, timestamp, uuid36
from models.enum_types import IntEnumType, StrEnumType
from models.states import PowerState, TaskState, VmState


class StepOutcome(StrEnum):
    """How a step's last delivery ended. A row with none is running, or its worker died
    (its ``deliveries`` then grow if the step is delivered again)."""

    SUCCESS = "success"
    FAILURE = "failure"
    RETRIED = "retried"
    REVOKED = "revoked"


class StepRecord(Base):
    __tablename__ = "step_records"
    __table_args__ = (
        UniqueConstraint("task_id", "instance_uuid"),
        Index("ix_step_records_instance_uuid_started_at", "instance_uuid", "started_at"),
    )

    id: Mapped[intpk]
    instance_uuid: Mapped[uuid36]
    request_id: Mapped[str255] = mapped_column(default="")
    task_id: Mapped[str255]
    task_name: Mapped[str255]
    #: The step that sent this one (Celery's parent id: the previous step of a chain, the
    #: scheduler step a build was handed over by).
    parent_id: Mapped[str | None] = mapped_column(String(255))
    queue: Mapped[str | None] = mapped_column(String(255))
    #: The Celery node of the last delivery (``compute@host1``) and its host.
    worker: Mapped[str | None] = mapped_column(String(255))
    host: Mapped[str | None] = mapped_column(String(255))
    deliveries: Mapped[int] = mapped_column(default=1)
    #: One line per delivery: ``<worker> <ISO time>`` (a redelivery names the new worker).
    delivery_log: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[timestamp]
    ended_at: Mapped[dt.datetime | None]
    outcome: Mapped[StepOutcome | None] = mapped_column(StrEnumType(StepOutcome, 16))
    #: What the step's result said (``active``, ``skipped``, ``superseded``...) or the
    #: task it handed over to; the error's text on a failure.
    detail: Mapped[str | None] = mapped_column(Text)
    vm_state_before: Mapped[VmState | None] = mapped_column(StrEnumType(VmState, 255))
    task_state_before: Mapped[TaskState | None] = mapped_column(StrEnumType(TaskState, 255))
    power_state_before: Mapped[PowerState | None] = mapped_column(IntEnumType(PowerState))
    vm_state_after: Mapped[VmState | None] = mapped_column(StrEnumType(VmState, 255))
    task_state_after: Mapped[TaskState | None] = mapped_column(StrEnumType(TaskState, 255))
    power_state_after: Mapped[PowerState | None] = mapped_column(IntEnumType(PowerState))

    def __repr__(self) -> str:
        return f"<StepRecord {self.task_name}[{self.task_id}] {self.instance_uuid} {self.outcome}>"
