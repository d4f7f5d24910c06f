"""``flavors`` and their ``flavor_extra_specs``, and ``FlavorSnapshot``: a flavor as an
instance, its request spec and a migration keep it (Nova's ``instance_extra.flavor`` and
``migration``'s old and new flavor), so a later edit or delete of the flavor row never
changes a running server.

One frozen model, one (de)serialiser: ``FlavorSnapshotType`` turns the JSON columns into
``FlavorSnapshot`` on read and back on write (same JSON as ever: ``id`` is the flavorid),
so no code reads a flavor dict by key.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import JSON, ForeignKey, String, UniqueConstraint, true
from sqlalchemy.orm import Mapped, mapped_column, relationship
from sqlalchemy.types import TypeDecorator

from models.base import Base, intpk, str255, timestamp


class Flavor(Base):
    """A flavor. Deleting one is a soft delete, as Nova's was (``deleted`` = the row's id,
    so a new flavor may take the name again): instances keep their ``flavor_id`` and
    their own snapshot of it. ``is_public`` False makes it private: only the projects of
    its ``projects`` (Nova's ``flavor_projects``) may boot with it."""

    __tablename__ = "flavors"
    __table_args__ = (UniqueConstraint("name", "deleted"), UniqueConstraint("flavorid", "deleted"))

    id: Mapped[intpk]
    flavorid: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(255))
    vcpus: Mapped[int]
    memory_mb: Mapped[int]
    root_gb: Mapped[int]
    ephemeral_gb: Mapped[int] = mapped_column(default=0)
    swap: Mapped[int] = mapped_column(default=0)
    disabled: Mapped[bool] = mapped_column(default=False)
    is_public: Mapped[bool] = mapped_column(default=True, server_default=true())
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0, server_default="0")
    extra_specs: Mapped[list[FlavorExtraSpec]] = relationship(
        back_populates="flavor", cascade="all, delete-orphan", lazy="selectin"
    )
    projects: Mapped[list[FlavorProject]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="FlavorProject.project_id"
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


class FlavorProject(Base):
    """A project that may use a private flavor (Nova's ``flavor_projects``)."""

    __tablename__ = "flavor_projects"
    __table_args__ = (UniqueConstraint("flavor_id", "project_id"),)

    id: Mapped[intpk]
    flavor_id: Mapped[int] = mapped_column(ForeignKey("flavors.id", ondelete="CASCADE"))
    project_id: Mapped[str255]
    created_at: Mapped[timestamp]


class FlavorSnapshot(BaseModel):
    """A flavor as it was when an instance took it. Fields in the stored JSON's order."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    #: The flavor's public id (``Flavor.flavorid``), stored under ``id`` as Nova's API.
    flavorid: str = Field(default="", alias="id")
    name: str = ""
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int = 0
    #: MB, as Nova's.
    swap: int = 0
    extra_specs: dict[str, str] = {}

    @classmethod
    def from_row(cls, flavor: Flavor) -> FlavorSnapshot:
        """The snapshot of a flavor row (every field set)."""
        return cls(
            flavorid=flavor.flavorid,
            name=flavor.name,
            vcpus=flavor.vcpus,
            memory_mb=flavor.memory_mb,
            root_gb=flavor.root_gb,
            ephemeral_gb=flavor.ephemeral_gb,
            swap=flavor.swap,
            extra_specs=flavor.extra_specs_dict,
        )

    @classmethod
    def load(cls, data: FlavorSnapshot | Mapping[str, Any]) -> FlavorSnapshot:
        """The one deserialiser: from the stored JSON (or as it is)."""
        if isinstance(data, FlavorSnapshot):
            return data
        return cls.model_validate(dict(data))

    @classmethod
    def load_optional(
        cls, data: FlavorSnapshot | Mapping[str, Any] | None
    ) -> FlavorSnapshot | None:
        """As ``load``, an empty or missing snapshot being None (a migration's default)."""
        return None if not data else cls.load(data)

    def dump(self) -> dict[str, Any]:
        """The one serialiser: the stored JSON, ``id`` for the flavorid; only the keys
        the snapshot was given (a snapshot of a row has them all), so a row read and
        written back keeps its shape."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class FlavorSnapshotType(TypeDecorator[FlavorSnapshot]):
    """A flavor snapshot column: JSON in the table, a FlavorSnapshot in Python. An empty
    JSON object (a migration created without flavors) reads as None and stays ``{}``."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> dict[str, Any] | None:
        if value is None:
            return None
        snapshot = FlavorSnapshot.load_optional(value)
        return {} if snapshot is None else snapshot.dump()

    def process_result_value(self, value: Any, dialect: Any) -> FlavorSnapshot | None:
        return FlavorSnapshot.load_optional(value)
