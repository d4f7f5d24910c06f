"""``compute_nodes``: a hypervisor node and its inventory (Nova's compute node plus the
placement resource provider's ``generation``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, str255, timestamp, uuid36


class ComputeNode(Base):
    __tablename__ = "compute_nodes"
    __table_args__ = (
        UniqueConstraint("host", "hypervisor_hostname", "deleted"),
        Index("ix_compute_nodes_host", "host"),
    )

    id: Mapped[intpk]
    uuid: Mapped[uuid36] = mapped_column(unique=True)
    host: Mapped[str255]
    hypervisor_hostname: Mapped[str255]
    hypervisor_type: Mapped[str] = mapped_column(String(255), default="")
    hypervisor_version: Mapped[int] = mapped_column(default=0)
    cpu_info: Mapped[str] = mapped_column(Text, default="{}")
    # Nova's ``host_ip``: the address the host reports (its ``[DEFAULT] my_ip``), as text
    # (39 characters: the longest IPv6 address written compressed). None until the host's
    # first resource audit records it.
    host_ip: Mapped[str | None] = mapped_column(String(39), nullable=True)
    # Physical totals, as the driver reports them.
    vcpus: Mapped[int] = mapped_column(default=0)
    memory_mb: Mapped[int] = mapped_column(default=0)
    local_gb: Mapped[int] = mapped_column(default=0)
    # Derived from allocations plus the reserved amounts; never written by hand.
    vcpus_used: Mapped[int] = mapped_column(default=0)
    memory_mb_used: Mapped[int] = mapped_column(default=0)
    local_gb_used: Mapped[int] = mapped_column(default=0)
    free_ram_mb: Mapped[int] = mapped_column(default=0)
    free_disk_gb: Mapped[int] = mapped_column(default=0)
    running_vms: Mapped[int] = mapped_column(default=0)
    # Inventory knobs, copied from settings at creation (Nova's initial_* rule).
    cpu_allocation_ratio: Mapped[float] = mapped_column(default=4.0)
    ram_allocation_ratio: Mapped[float] = mapped_column(default=1.0)
    disk_allocation_ratio: Mapped[float] = mapped_column(default=1.0)
    reserved_vcpus: Mapped[int] = mapped_column(default=0)
    reserved_memory_mb: Mapped[int] = mapped_column(default=512)
    reserved_disk_gb: Mapped[int] = mapped_column(default=0)
    stats: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The resource monitors' last readings, JSON text as Nova's (``compute.monitors``):
    # a list of {name, value, timestamp, source}; "[]" when no monitor is enabled.
    metrics: Mapped[str] = mapped_column(Text, default="[]", server_default="[]")
    # Placement's resource-provider generation: every claim bumps it with compare-and-swap.
    generation: Mapped[int] = mapped_column(default=0)
    # Set once discover_hosts has mapped this node's host to a cell.
    mapped: Mapped[int] = mapped_column(default=0, server_default="0")
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)

    def __repr__(self) -> str:
        return f"<ComputeNode {self.host}/{self.hypervisor_hostname} gen={self.generation}>"
