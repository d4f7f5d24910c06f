"""``console_auth_tokens``: one row per console URL handed out; only the SHA-256 of the
token is stored, as Nova does."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from models.base import Base, intpk, timestamp


class ConsoleAuthToken(Base):
    __tablename__ = "console_auth_tokens"

    id: Mapped[intpk]
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    console_type: Mapped[str] = mapped_column(String(64))
    host: Mapped[str] = mapped_column(String(255))
    port: Mapped[int]
    internal_access_path: Mapped[str | None] = mapped_column(String(255))
    instance_uuid: Mapped[str] = mapped_column(String(36), index=True)
    # Epoch seconds, as Nova stores them.
    expires: Mapped[int] = mapped_column(index=True)
    access_url_base: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
