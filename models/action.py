"""``instance_actions``, their ``instance_actions_events`` and ``instance_faults``."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models.base import Base, intpk, str255, timestamp, uuid36


class InstanceAction(Base):
    __tablename__ = "instance_actions"

    id: Mapped[intpk]
    instance_uuid: Mapped[uuid36] = mapped_column(index=True)
    action: Mapped[str255]
    request_id: Mapped[str255] = mapped_column(index=True)
    start_time: Mapped[timestamp]
    finish_time: Mapped[dt.datetime | None]
    message: Mapped[str | None] = mapped_column(String(255))
    events: Mapped[list[InstanceActionEvent]] = relationship(
        back_populates="action_row",
        cascade="all, delete-orphan",
        lazy="selectin",
        order_by="InstanceActionEvent.id",
    )


class InstanceActionEvent(Base):
    __tablename__ = "instance_actions_events"

    id: Mapped[intpk]
    action_id: Mapped[int] = mapped_column(
        ForeignKey("instance_actions.id", ondelete="CASCADE"), index=True
    )
    event: Mapped[str255]
    start_time: Mapped[timestamp]
    finish_time: Mapped[dt.datetime | None]
    result: Mapped[str | None] = mapped_column(String(255))
    traceback: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))
    details: Mapped[str | None] = mapped_column(Text)
    action_row: Mapped[InstanceAction] = relationship(back_populates="events")


class InstanceFault(Base):
    __tablename__ = "instance_faults"

    id: Mapped[intpk]
    instance_uuid: Mapped[uuid36] = mapped_column(index=True)
    code: Mapped[int]
    message: Mapped[str255]
    details: Mapped[str | None] = mapped_column(Text)
    host: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[timestamp]
