"""``instances``: a server. Two state axes as in Nova: ``vm_state`` (stable) and
``task_state`` (in flight); ``power_state`` is the hypervisor's last known view."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, str255, timestamp, uuid36


class Instance(Base):
    __tablename__ = "instances"
    __table_args__ = (
        Index("ix_instances_host_deleted", "host", "deleted"),
        Index("ix_instances_host_deleted_cleaned", "host", "deleted", "cleaned"),
    )

    id: Mapped[intpk]
    uuid: Mapped[uuid36] = mapped_column(unique=True)
    display_name: Mapped[str255]
    flavor_id: Mapped[int] = mapped_column(ForeignKey("flavors.id"))
    # A snapshot of the flavor at boot (with extra_specs), as Nova's instance_extra.flavor.
    flavor: Mapped[dict[str, Any]] = mapped_column(JSON)
    image_ref: Mapped[str] = mapped_column(String(255), default="")
    vcpus: Mapped[int] = mapped_column(default=0)
    memory_mb: Mapped[int] = mapped_column(default=0)
    root_gb: Mapped[int] = mapped_column(default=0)
    ephemeral_gb: Mapped[int] = mapped_column(default=0)
    vm_state: Mapped[str] = mapped_column(String(255))
    task_state: Mapped[str | None] = mapped_column(String(255))
    power_state: Mapped[int] = mapped_column(default=0)
    host: Mapped[str | None] = mapped_column(String(255))
    node: Mapped[str | None] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    launched_at: Mapped[dt.datetime | None]
    terminated_at: Mapped[dt.datetime | None]
    # The boot request as the scheduler needs it (hints, group, count index).
    request_spec: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    system_metadata: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)
    # Nova's ``cleaned``: the host's files of a deleted instance are gone
    # (``_run_pending_deletes`` retries until they are).
    cleaned: Mapped[int] = mapped_column(default=0, server_default="0")

    def __repr__(self) -> str:
        return f"<Instance {self.uuid} {self.vm_state}/{self.task_state} on {self.host}>"
