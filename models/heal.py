"""``resource_heals``: every correction the resource tracker made to the accounting, so an
operator can read what was healed, for which consumer, and how much."""

from __future__ import annotations

from sqlalchemy import String, Text
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp


class ResourceHeal(Base):
    __tablename__ = "resource_heals"

    id: Mapped[intpk]
    created_at: Mapped[timestamp] = mapped_column(index=True)
    host: Mapped[str] = mapped_column(String(255))
    node: Mapped[str] = mapped_column(String(255))
    consumer_uuid: Mapped[str | None] = mapped_column(String(36))
    # "removed", "recreated", "orphan_counted", "pci_freed", "node_deleted", "resized"
    action: Mapped[str] = mapped_column(String(32))
    resources: Mapped[str] = mapped_column(Text, default="")
    reason: Mapped[str] = mapped_column(Text, default="")

    def __repr__(self) -> str:
        return f"<ResourceHeal {self.action} {self.consumer_uuid} {self.resources}>"
