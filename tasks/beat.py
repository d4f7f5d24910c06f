"""novaq's beat scheduler: Celery's ``PersistentScheduler`` (last runs kept in a shelve
file in the state directory) plus two things Nova's periodic runner had and beat has not:

- **a singleton**: the beat lease (``compute/periodic/beat_lease.py``) is taken before the first
  tick and renewed at every tick; a second beat exits with an error naming the first,
  unless it is a standby (:class:`StandbyScheduler`, ``novaq controller``'s beat): that
  one waits for the lease and takes over when the holder dies, within
  :data:`TAKEOVER_BOUND_S` of its death;
- **run_immediately**: entries of the scheduler's tasks Nova marks ``run_immediately``
  are due at start instead of one spacing later (the compute ones run at each compute
  worker's own start).

Beat outlives the database being down: at start it waits for the database before taking
the lease (``tasks/waiting.py``), and while it runs a renewal that cannot reach the
database publishes nothing until the lease is renewed again (a beat that cannot prove it
holds the lease must not tick; the lease, kept by ``holder``, survives its expiry until
another beat takes it). A broker that is down is Celery's business: the scheduler's
producer waits for the connection (``broker_connection_max_retries``) and then sends what
is due.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from celery.beat import PersistentScheduler

from compute.periodic import beat_lease
from compute.periodic.schedule import BY_NAME
from compute.sessions import sessions_for
from novaq.settings import get_settings
from tasks.waiting import database_unreachable, until_database_answers

LOG = logging.getLogger(__name__)

#: How long a lease lives without renewal, and how often beat renews it.
LEASE_TTL_S = 30.0
RENEW_EVERY_S = 5.0
#: How often a beat that lost the database tries to renew its lease.
DATABASE_RETRY_S = 2.0
#: How often a standby beat tries to take the lease another beat holds.
STANDBY_POLL_S = 2.0
#: The longest a standby beat waits after the holder's death: the holder renewed at
#: most when it died, so its lease expires at most LEASE_TTL_S later, and the standby
#: tries again at most STANDBY_POLL_S after that. (Plus the clock difference between the
#: two machines: the expiry is written by the holder's clock and read by the standby's.)
TAKEOVER_BOUND_S = LEASE_TTL_S + STANDBY_POLL_S


#: One holder per beat process (the scheduler object may be built more than once), or the
#: one its supervisor names: ``novaq up`` gives every beat it (re)starts the same holder,
#: so a beat restarted after a SIGKILL takes back the lease its dead predecessor left
#: instead of being refused for the lease's TTL (the supervisor has reaped that one, so
#: there is still one beat).
HOLDER_ENV = "NOVAQ_BEAT_LEASE_HOLDER"
_PROCESS_HOLDER = (
    os.environ.get(HOLDER_ENV) or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
)


class SecondBeatError(SystemExit):
    """Raised (exits beat) when another beat holds the lease."""


class NovaqScheduler(PersistentScheduler):  # type: ignore[misc]
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lease_holder: str = kwargs.pop("lease_holder", None) or _PROCESS_HOLDER
        self._sessions = sessions_for(get_settings().sqlalchemy_url)
        self._renewed_at = 0.0
        self._holds_lease = False
        self._database_lost_at: float | None = None
        if kwargs.get("lazy"):
            # Beat builds a lazy instance only to print its banner: no lease, no schedule.
            super().__init__(*args, **kwargs)
            return
        filename = kwargs.get("schedule_filename")
        if filename:
            Path(filename).parent.mkdir(parents=True, exist_ok=True)
        with _exit_on_stop_signals():
            until_database_answers("Taking the beat lease", self._take_lease, logger=LOG)
        try:
            super().__init__(*args, **kwargs)
        except BaseException:
            beat_lease.release(self._sessions, self.lease_holder)
            raise
        if filename:
            _make_private(Path(filename))

    def _take_lease(self) -> None:
        other = beat_lease.acquire(self._sessions, self.lease_holder, LEASE_TTL_S)
        if other is not None:
            message = (
                f"another celery beat ({other.holder}) holds the beat lease until "
                f"{other.expires_at:%Y-%m-%d %H:%M:%S} UTC; novaq runs exactly one beat "
                f"(two would publish every periodic task twice). Stop the other one, or "
                f"wait {LEASE_TTL_S:.0f} s after it died."
            )
            LOG.error(message)
            raise SecondBeatError(message)
        self._renewed_at = time.monotonic()
        self._holds_lease = True
        LOG.info("beat lease taken by %s", self.lease_holder)

    def setup_schedule(self) -> None:
        super().setup_schedule()
        now = self.app.now()
        for name, entry in self.schedule.items():
            task = BY_NAME.get(name)
            # A compute task's "start" is its worker's: each compute worker queues its own
            # run-immediately tasks when it (re)starts (``queue_run_immediately``), as
            # each nova-compute does. Making them due at beat's start as well ran them
            # twice whenever beat and the workers started together.
            if task is not None and task.run_immediately and not task.per_host:
                # Due now: as if it last ran one spacing ago.
                entry.last_run_at = now - dt.timedelta(seconds=entry.schedule.seconds)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if time.monotonic() - self._renewed_at >= RENEW_EVERY_S:
            try:
                renewed = beat_lease.renew(self._sessions, self.lease_holder, LEASE_TTL_S)
            except Exception as exc:
                if not database_unreachable(exc):
                    raise
                self._lost_database(exc)
                return DATABASE_RETRY_S  # nothing published without the lease
            if not renewed:
                message = f"beat {self.lease_holder} lost its lease; stopping"
                LOG.error(message)
                raise SecondBeatError(message)
            self._renewed_at = time.monotonic()
            self._found_database()
        interval: float = super().tick(*args, **kwargs)
        return min(interval, RENEW_EVERY_S)

    def _lost_database(self, exc: BaseException) -> None:
        if self._database_lost_at is not None:
            return
        self._database_lost_at = time.monotonic()
        LOG.warning(
            "beat cannot renew its lease: the database is unreachable (%s); nothing is "
            "published until it answers, retrying every %g s",
            " ".join(str(exc).split())[:300],
            DATABASE_RETRY_S,
        )

    def _found_database(self) -> None:
        if self._database_lost_at is None:
            return
        LOG.warning(
            "beat renewed its lease after the database was unreachable for %.0f s; "
            "publishing again",
            time.monotonic() - self._database_lost_at,
        )
        self._database_lost_at = None

    def close(self) -> None:
        super().close()
        if not self._holds_lease:
            return
        self._holds_lease = False
        try:
            beat_lease.release(self._sessions, self.lease_holder)
        except Exception:  # noqa: BLE001 - the lease expires on its own
            LOG.exception("could not release the beat lease")


class StandbyScheduler(NovaqScheduler):
    """A beat that waits while another holds the lease, instead of exiting: the beat of
    each ``novaq controller``, so that when the machine whose beat publishes dies, another
    controller's beat takes over (within :data:`TAKEOVER_BOUND_S`) with no one restarting
    anything. Until then it publishes nothing; SIGTERM ends the wait at once."""

    def _take_lease(self) -> None:
        waiting_for: str | None = None
        while True:
            other = beat_lease.acquire(self._sessions, self.lease_holder, LEASE_TTL_S)
            if other is None:
                break
            if other.holder != waiting_for:
                waiting_for = other.holder
                LOG.info(
                    "beat %s standing by: %s holds the beat lease (until %s UTC unless "
                    "renewed); trying every %g s",
                    self.lease_holder,
                    other.holder,
                    f"{other.expires_at:%Y-%m-%d %H:%M:%S}",
                    STANDBY_POLL_S,
                )
            time.sleep(STANDBY_POLL_S)
        self._renewed_at = time.monotonic()
        self._holds_lease = True
        if waiting_for is None:
            LOG.info("beat lease taken by %s", self.lease_holder)
        else:
            LOG.warning("beat %s took over the beat lease from %s", self.lease_holder, waiting_for)


@contextlib.contextmanager
def _exit_on_stop_signals() -> Iterator[None]:
    """SIGTERM and SIGINT exit at once while the scheduler is being built.

    Beat's own handler (``install_sync_handler``) syncs the scheduler first; while it is
    still being built (waiting for the database), that sync would build a second one and
    wait inside the signal handler.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _exit(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, _exit) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _make_private(schedule: Path) -> None:
    """Strip the group and other bits from beat's schedule (shelve may add a suffix).

    The launcher runs beat under umask 077 already; this covers a beat started by hand.
    """
    for path in schedule.parent.glob(f"{schedule.name}*"):
        mode = path.stat().st_mode & 0o7777
        if path.is_file() and mode & 0o077:
            os.chmod(path, mode & ~0o077)
