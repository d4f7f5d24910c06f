"""A database outage scheduled by a test, for the unit tier: a ``Sessions`` factory over
the real (SQLite) database whose transactions fail exactly where the test wants them to
(the integration tier makes real outages with ``tests.tcp_proxy`` instead)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from sqlalchemy.orm import Session

from compute.sessions import sessions_for
from models import outage
from novaq.exceptions import DatabaseUnavailable


class ScheduledOutage:
    """A ``Sessions`` factory over the real database whose next transactions fail as the
    test planned: ``down`` (its connect refused, which ``session_scope`` waits out before
    the transaction starts, as here), ``cut`` (its connection lost before the commit:
    rolled back), ``lost`` (committed, the answer lost); and, until ``down_until``
    (``time.monotonic()``), every connect is refused."""

    def __init__(self, db_url: str) -> None:
        self.real = sessions_for(db_url)
        self.plan: list[str] = []
        self.down_until = 0.0
        self.failed = 0

    def __call__(self, read_only: bool = False) -> contextlib.AbstractContextManager[Session]:
        return self._transaction(read_only)

    def _fail(self, what: str) -> DatabaseUnavailable:
        self.failed += 1
        return DatabaseUnavailable(reason=f"{what} (scheduled by the test)")

    def _connect(self) -> str | None:
        mode = self.plan.pop(0) if self.plan else None
        if mode == "down" or time.monotonic() < self.down_until:
            raise self._fail("connection refused")
        return mode

    @contextlib.contextmanager
    def _transaction(self, read_only: bool) -> Iterator[Session]:
        mode = outage.ride_out(self._connect, "connect")
        with self.real(read_only=read_only) as session:
            yield session
            if mode == "cut":
                raise self._fail("server closed the connection unexpectedly")
        if mode == "lost":
            raise self._fail("server closed the connection unexpectedly")
