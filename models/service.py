"""``services``: one row per novaq process that reports in (compute hosts, schedulers).

A service's liveness (``report_count``, ``last_seen_up``) is read here, from
``service_liveness`` (``models.liveness``), and written there by its heartbeats only.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, column_property, mapped_column

from models.base import Base, str255, timestamp
from models.liveness import ServiceLiveness

_LIVENESS = ServiceLiveness.__table__.c


def _liveness_of(service_id: Any, column: Any) -> Any:
    """The service's ``column`` of its liveness row, loaded with the row (read-only:
    ``compute.servicegroup`` writes it)."""
    return column_property(
        select(column)
        .where(_LIVENESS.service_id == service_id)
        .correlate_except(ServiceLiveness)
        .scalar_subquery()
    )


class Service(Base):
    __tablename__ = "services"
    __table_args__ = (UniqueConstraint("host", "binary", "deleted"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    host: Mapped[str255]
    binary: Mapped[str] = mapped_column(String(64))
    topic: Mapped[str | None] = mapped_column(String(255))
    disabled: Mapped[bool] = mapped_column(default=False)
    disabled_reason: Mapped[str | None] = mapped_column(String(255))
    forced_down: Mapped[bool] = mapped_column(default=False)
    version: Mapped[int] = mapped_column(default=1)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)
    #: A compute host's disk endpoint (``http://<my_ip>:<port>``), where the destination
    #: of a move pulls the disks from; None: it publishes none (no ``[transfer] secret``).
    disk_endpoint: Mapped[str | None] = mapped_column(String(255))

    report_count: Mapped[int | None] = _liveness_of(id, _LIVENESS.report_count)
    last_seen_up: Mapped[dt.datetime | None] = _liveness_of(id, _LIVENESS.last_seen_up)

    def __repr__(self) -> str:
        return f"<Service {self.binary}@{self.host} reports={self.report_count}>"
