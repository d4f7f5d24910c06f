"""``allocations``: the one truth of usage, as placement keeps it.

A row says: consumer (an instance uuid, or a migration uuid for the source side of a
move) uses ``used`` units of ``resource_class`` on compute node ``compute_node_id``.
"""

from __future__ import annotations

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp, uuid36

VCPU = "VCPU"
MEMORY_MB = "MEMORY_MB"
DISK_GB = "DISK_GB"
RESOURCE_CLASSES = (VCPU, MEMORY_MB, DISK_GB)


class Allocation(Base):
    __tablename__ = "allocations"
    __table_args__ = (
        UniqueConstraint("compute_node_id", "consumer_uuid", "resource_class"),
        # A claim's usage read of a node (sums by class, its consumers) reads only this
        # index (no table row); its compute_node_id prefix serves every by-node lookup.
        Index(
            "ix_allocations_compute_node_usage",
            "compute_node_id",
            "resource_class",
            "used",
            "consumer_uuid",
        ),
    )

    id: Mapped[intpk]
    compute_node_id: Mapped[int] = mapped_column(ForeignKey("compute_nodes.id", ondelete="CASCADE"))
    consumer_uuid: Mapped[uuid36] = mapped_column(index=True)
    resource_class: Mapped[str] = mapped_column(String(64))
    used: Mapped[int]
    created_at: Mapped[timestamp]

    def __repr__(self) -> str:
        return f"<Allocation {self.consumer_uuid} {self.resource_class}={self.used}>"
