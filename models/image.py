"""``images``: the image registry, Glance's fields as Nova reads them.

An image's data lives in the image store (``[glance] store_path``) under its id; the row
says where (``location``), how big it is (``size``: the bytes stored; ``virtual_size``:
the disk those bytes describe, from ``qemu-img info``), its SHA-256 (``os_hash_value``,
Glance's name: ``os_hash_algo`` is always ``sha256`` here) and what Nova checks at boot
(``min_disk`` GB, ``min_ram`` MB, ``properties``).
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, str255, timestamp, uuid36


class ImageStatus(StrEnum):
    """Glance's statuses that novaq's store passes through (no ``saving``/``killed``:
    an upload that fails leaves no row)."""

    QUEUED = "queued"
    ACTIVE = "active"
    DELETED = "deleted"


class DiskFormat(StrEnum):
    """The formats novaq's image backend can boot (Glance knows more)."""

    RAW = "raw"
    QCOW2 = "qcow2"


class ContainerFormat(StrEnum):
    """Glance's container formats; Nova boots ``bare`` (``ovf`` is a bare disk in a
    metadata envelope that Nova ignores)."""

    BARE = "bare"
    OVF = "ovf"


class Image(Base):
    __tablename__ = "images"

    id: Mapped[uuid36] = mapped_column(primary_key=True)
    name: Mapped[str255] = mapped_column(index=True)
    disk_format: Mapped[str] = mapped_column(String(16))
    container_format: Mapped[str] = mapped_column(String(16), default=ContainerFormat.BARE)
    status: Mapped[str] = mapped_column(String(16), default=ImageStatus.QUEUED)
    size: Mapped[int | None] = mapped_column(BigInteger)
    virtual_size: Mapped[int | None] = mapped_column(BigInteger)
    os_hash_algo: Mapped[str] = mapped_column(String(16), default="sha256")
    os_hash_value: Mapped[str | None] = mapped_column(String(128))
    min_disk: Mapped[int] = mapped_column(default=0)
    min_ram: Mapped[int] = mapped_column(default=0)
    properties: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    location: Mapped[str | None] = mapped_column(String(1024))
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted_at: Mapped[dt.datetime | None]

    def __repr__(self) -> str:
        return f"<Image {self.id} {self.name!r} {self.disk_format} {self.status}>"
