"""``operations_in_flight``: the durable record of each server's operation in flight
(DESIGN.md, Durability). One row per instance (the task_state gate allows one operation
at a time), holding the message that moves the operation on next: the first step's, as
published; then, as each step starts, its own (with the rest of its chain); as it ends,
its successor's. The row goes when the last step ends. A row that stays still too long
is the reaper's (``compute/in_flight.py``): its message is sent again, or the operation
undone."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, timestamp


class OperationInFlight(Base):
    __tablename__ = "operations_in_flight"

    instance_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    request_id: Mapped[str] = mapped_column(String(255))
    #: The task_state the operation set (None: an operation that sets none).
    task_state: Mapped[str | None] = mapped_column(String(255))
    #: The message to send again: name, id, args, kwargs, chain, link_error, root/parent
    #: ids (``{}``: none known, e.g. after a ``Task.replace``; the reaper then undoes).
    message: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: The task id of ``message`` (so a step only clears the row it is the owner of).
    #: Indexed: every step's end finds its rows by it (a DELETE or an UPDATE).
    task_id: Mapped[str | None] = mapped_column(String(255), index=True)
    resent: Mapped[int] = mapped_column(default=0)
    #: When the reaper first saw the step's host down (it undoes only after watching it
    #: stay down for a while: heartbeats missed during a database outage do not count).
    host_down_since: Mapped[dt.datetime | None]
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime]
