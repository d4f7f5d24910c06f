"""``instance_groups`` (server groups) and their members."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models.base import Base, intpk, timestamp, uuid36

POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")


class ServerGroup(Base):
    __tablename__ = "instance_groups"

    id: Mapped[intpk]
    uuid: Mapped[uuid36] = mapped_column(unique=True)
    name: Mapped[str] = mapped_column(String(255))
    policy: Mapped[str] = mapped_column(String(32))
    rules: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    members: Mapped[list[ServerGroupMember]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="ServerGroupMember.id"
    )


class ServerGroupMember(Base):
    __tablename__ = "instance_group_member"
    __table_args__ = (UniqueConstraint("group_id", "instance_uuid"),)

    id: Mapped[intpk]
    group_id: Mapped[int] = mapped_column(ForeignKey("instance_groups.id", ondelete="CASCADE"))
    instance_uuid: Mapped[uuid36] = mapped_column(index=True)
