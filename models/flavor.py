"""``flavors`` and their ``flavor_extra_specs``."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import ForeignKey, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from models.base import Base, intpk, str255, timestamp


class Flavor(Base):
    __tablename__ = "flavors"

    id: Mapped[intpk]
    flavorid: Mapped[str] = mapped_column(String(255), unique=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    vcpus: Mapped[int]
    memory_mb: Mapped[int]
    root_gb: Mapped[int]
    ephemeral_gb: Mapped[int] = mapped_column(default=0)
    swap: Mapped[int] = mapped_column(default=0)
    disabled: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    extra_specs: Mapped[list[FlavorExtraSpec]] = relationship(
        back_populates="flavor", cascade="all, delete-orphan", lazy="selectin"
    )

    @property
    def extra_specs_dict(self) -> dict[str, str]:
        return {spec.key: spec.value for spec in self.extra_specs}

    def __repr__(self) -> str:
        return f"<Flavor {self.name} {self.vcpus}c/{self.memory_mb}M/{self.root_gb}G>"


class FlavorExtraSpec(Base):
    __tablename__ = "flavor_extra_specs"
    __table_args__ = (UniqueConstraint("flavor_id", "key"),)

    id: Mapped[intpk]
    flavor_id: Mapped[int] = mapped_column(ForeignKey("flavors.id", ondelete="CASCADE"))
    key: Mapped[str255]
    value: Mapped[str255]
    flavor: Mapped[Flavor] = relationship(back_populates="extra_specs")
