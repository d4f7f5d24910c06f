"""``instance_info_caches``: what the hypervisor says a guest is attached to (disks,
passthrough devices, consoles), cached so reads need not ask the host; healed one
instance at a time by ``_heal_instance_info_cache`` (Nova caches network info there)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp


class InstanceInfoCache(Base):
    __tablename__ = "instance_info_caches"

    id: Mapped[intpk]
    instance_uuid: Mapped[str] = mapped_column(String(36), unique=True)
    device_info: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
