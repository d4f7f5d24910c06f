"""``volume_usage_cache``: the last block I/O counters read from the hypervisor for each
disk of each guest (Nova keeps them per Cinder volume; novaq has no volume service, so
the guest's own disks are the volumes)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import BigInteger, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp


class VolumeUsage(Base):
    __tablename__ = "volume_usage_cache"
    __table_args__ = (UniqueConstraint("volume_id"),)

    id: Mapped[intpk]
    # "<instance uuid>/<target dev>", e.g. "…/vda"
    volume_id: Mapped[str] = mapped_column(String(255))
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)
    host: Mapped[str] = mapped_column(String(255))
    tot_last_refreshed: Mapped[dt.datetime | None]
    tot_reads: Mapped[int] = mapped_column(BigInteger, default=0)
    tot_read_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    tot_writes: Mapped[int] = mapped_column(BigInteger, default=0)
    tot_write_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    curr_last_refreshed: Mapped[dt.datetime | None]
    curr_reads: Mapped[int] = mapped_column(BigInteger, default=0)
    curr_read_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    curr_writes: Mapped[int] = mapped_column(BigInteger, default=0)
    curr_write_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
