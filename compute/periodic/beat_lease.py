"""The lease that keeps celery beat a singleton.

Two beats on one schedule publish every tick twice (Celery's periodic-tasks guide), so a
beat holds a lease row in the database while it runs: taken at start with a
compare-and-swap (free, expired, or already ours), renewed every few seconds, released at
exit. A second beat finds the lease held and refuses to start; a beat that cannot renew
(it lost the lease while stalled) stops. The database is the one thing every novaq
process shares whatever the broker, which is why the lease lives there.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import IntegrityError

from compute.sessions import Sessions
from models import BeatLease, utcnow

BEAT = "beat"


def acquire(sessions: Sessions, holder: str, ttl_s: float, name: str = BEAT) -> BeatLease | None:
    """Take the lease for ``ttl_s`` seconds. Returns None when taken, else the live lease
    of whoever holds it."""
    now = utcnow()
    expires = now + dt.timedelta(seconds=ttl_s)
    with sessions() as session:
        taken = session.execute(  # type: ignore[attr-defined]  # a DML result is a CursorResult
            update(BeatLease)
            .where(
                BeatLease.name == name,
                or_(BeatLease.holder == holder, BeatLease.expires_at < now),
            )
            .values(holder=holder, acquired_at=now, expires_at=expires)
        ).rowcount
        if taken:
            return None
        current = session.get(BeatLease, name)
        if current is None:
            try:
                with session.begin_nested():
                    session.add(
                        BeatLease(name=name, holder=holder, acquired_at=now, expires_at=expires)
                    )
                return None
            except IntegrityError:
                current = session.get(BeatLease, name)
        session.expunge(current)
        return current


def renew(sessions: Sessions, holder: str, ttl_s: float, name: str = BEAT) -> bool:
    """Extend our lease; False if it is no longer ours."""
    expires = utcnow() + dt.timedelta(seconds=ttl_s)
    with sessions() as session:
        return bool(
            session.execute(  # type: ignore[attr-defined]  # a DML result is a CursorResult
                update(BeatLease)
                .where(BeatLease.name == name, BeatLease.holder == holder)
                .values(expires_at=expires)
            ).rowcount
        )


def release(sessions: Sessions, holder: str, name: str = BEAT) -> None:
    with sessions() as session:
        session.execute(delete(BeatLease).where(BeatLease.name == name, BeatLease.holder == holder))


def holder_of(sessions: Sessions, name: str = BEAT) -> BeatLease | None:
    """The live lease, if any (for ``novaq periodic-list``)."""
    with sessions() as session:
        lease = session.scalars(
            select(BeatLease).where(BeatLease.name == name, BeatLease.expires_at >= utcnow())
        ).first()
        if lease is not None:
            session.expunge(lease)
        return lease
