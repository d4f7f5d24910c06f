"""``pci_devices``: each passthrough-capable device of a node, its status and its owner.

Statuses are Nova's (``available``, ``claimed``, ``allocated``, ``removed``). The owner is
an instance; ``consumer_uuid`` says which allocation consumer holds it (the instance, or a
migration holding the source side of a move), so devices are released with the claim.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp

AVAILABLE = "available"
CLAIMED = "claimed"
ALLOCATED = "allocated"
REMOVED = "removed"


class PciDevice(Base):
    __tablename__ = "pci_devices"
    __table_args__ = (UniqueConstraint("compute_node_id", "address", "deleted"),)

    id: Mapped[intpk]
    compute_node_id: Mapped[int] = mapped_column(
        ForeignKey("compute_nodes.id", ondelete="CASCADE"), index=True
    )
    address: Mapped[str] = mapped_column(String(12))
    vendor_id: Mapped[str] = mapped_column(String(4))
    product_id: Mapped[str] = mapped_column(String(4))
    dev_type: Mapped[str] = mapped_column(String(8), default="type-PCI")
    numa_node: Mapped[int | None]
    alias: Mapped[str | None] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(36), default=AVAILABLE)
    instance_uuid: Mapped[str | None] = mapped_column(String(36), index=True)
    consumer_uuid: Mapped[str | None] = mapped_column(String(36), index=True)
    request_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)

    def __repr__(self) -> str:
        return f"<PciDevice {self.address} {self.status} {self.instance_uuid}>"
