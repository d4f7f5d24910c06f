"""``migrations``: a resize or cold migration of an instance, Nova's record of a move.

During a move the migration's uuid is the allocation consumer that holds the source
node (old flavor) while the instance's uuid holds the destination (new flavor).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp, uuid36


class Migration(Base):
    __tablename__ = "migrations"
    __table_args__ = (
        Index("ix_migrations_source", "source_compute", "source_node", "status"),
        Index("ix_migrations_dest", "dest_compute", "dest_node", "status"),
    )

    id: Mapped[intpk]
    uuid: Mapped[uuid36] = mapped_column(unique=True)
    instance_uuid: Mapped[uuid36] = mapped_column(index=True)
    migration_type: Mapped[str] = mapped_column(String(32))  # "resize" or "migration"
    status: Mapped[str] = mapped_column(String(32))
    source_compute: Mapped[str | None] = mapped_column(String(255))
    source_node: Mapped[str | None] = mapped_column(String(255))
    dest_compute: Mapped[str | None] = mapped_column(String(255))
    dest_node: Mapped[str | None] = mapped_column(String(255))
    old_flavor: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    new_flavor: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # What the move holds while in flight (Nova's MigrationContext): PCI requests, devices.
    context: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    request_id: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)

    def __repr__(self) -> str:
        return f"<Migration {self.uuid} {self.migration_type} {self.status}>"
