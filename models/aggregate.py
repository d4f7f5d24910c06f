"""``aggregates`` with their hosts and metadata; an availability zone is the aggregate
metadata key ``availability_zone``, as in Nova."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models.base import Base, intpk, str255, timestamp, uuid36


class Aggregate(Base):
    __tablename__ = "aggregates"

    id: Mapped[intpk]
    uuid: Mapped[uuid36] = mapped_column(unique=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    hosts: Mapped[list[AggregateHost]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="AggregateHost.host"
    )
    metadata_items: Mapped[list[AggregateMetadata]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="AggregateMetadata.key"
    )

    @property
    def metadata_dict(self) -> dict[str, str]:
        return {m.key: m.value for m in self.metadata_items}


class AggregateHost(Base):
    __tablename__ = "aggregate_hosts"
    __table_args__ = (UniqueConstraint("aggregate_id", "host"),)

    id: Mapped[intpk]
    aggregate_id: Mapped[int] = mapped_column(ForeignKey("aggregates.id", ondelete="CASCADE"))
    host: Mapped[str255]


class AggregateMetadata(Base):
    __tablename__ = "aggregate_metadata"
    __table_args__ = (UniqueConstraint("aggregate_id", "key"),)

    id: Mapped[intpk]
    aggregate_id: Mapped[int] = mapped_column(ForeignKey("aggregates.id", ondelete="CASCADE"))
    key: Mapped[str255]
    value: Mapped[str255]
