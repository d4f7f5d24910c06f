"""``periodic_task_runs``: the no-overlap lease of each (task, host) and the record of its
last run.

Nova ran a host's periodic tasks one after another in one loop, so a task never overlapped
itself. Beat does not wait for a run to end, so a run first takes the lease on its
(task, host) row with a compare-and-swap; a run that finds it held by another runner, and
not stale, is skipped. A lease is stale after ``stale_after`` seconds (the runner died).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from compute.sessions import Sessions
from models import PeriodicTaskRun, utcnow

OK, ERROR, SKIPPED = "ok", "error", "skipped"


def _row(session: Session, task_name: str, host: str) -> None:
    exists = session.scalar(
        select(PeriodicTaskRun.id).where(
            PeriodicTaskRun.task_name == task_name, PeriodicTaskRun.host == host
        )
    )
    if exists is None:
        try:
            with session.begin_nested():
                session.add(PeriodicTaskRun(task_name=task_name, host=host, last_result={}))
        except IntegrityError:
            pass  # another runner created it first


def begin(sessions: Sessions, task_name: str, host: str, runner: str, stale_after: float) -> bool:
    """Take the lease; False if a live run of the same task on the same host holds it."""
    now = utcnow()
    stale = now - dt.timedelta(seconds=stale_after)
    with sessions() as session:
        _row(session, task_name, host)
        taken = session.execute(  # type: ignore[attr-defined]  # a DML result is a CursorResult
            update(PeriodicTaskRun)
            .where(
                PeriodicTaskRun.task_name == task_name,
                PeriodicTaskRun.host == host,
                or_(
                    PeriodicTaskRun.running_since.is_(None),
                    PeriodicTaskRun.running_since < stale,
                    PeriodicTaskRun.runner == runner,
                ),
            )
            .values(running_since=now, runner=runner, last_started_at=now)
        ).rowcount
        if not taken:
            session.execute(
                update(PeriodicTaskRun)
                .where(PeriodicTaskRun.task_name == task_name, PeriodicTaskRun.host == host)
                .values(skip_count=PeriodicTaskRun.skip_count + 1)
            )
        return bool(taken)


def finish(
    sessions: Sessions,
    task_name: str,
    host: str,
    runner: str,
    status: str,
    result: dict[str, Any] | None = None,
    error: str | None = None,
) -> None:
    """Record the run and release the lease (only if this runner still holds it)."""
    now = utcnow()
    with sessions() as session:
        session.execute(
            update(PeriodicTaskRun)
            .where(
                PeriodicTaskRun.task_name == task_name,
                PeriodicTaskRun.host == host,
                PeriodicTaskRun.runner == runner,
            )
            .values(
                running_since=None,
                last_finished_at=now,
                last_status=status,
                last_result=result or {},
                last_error=error,
                run_count=PeriodicTaskRun.run_count + 1,
            )
        )


def record_skip(sessions: Sessions, task_name: str, host: str, reason: str) -> None:
    """A run that had nothing to do because its gate option is off (Nova's early return)."""
    now = utcnow()
    with sessions() as session:
        _row(session, task_name, host)
        session.execute(
            update(PeriodicTaskRun)
            .where(PeriodicTaskRun.task_name == task_name, PeriodicTaskRun.host == host)
            .values(
                last_started_at=now,
                last_finished_at=now,
                last_status=SKIPPED,
                last_result={"skipped": reason},
                last_error=None,
                run_count=PeriodicTaskRun.run_count + 1,
            )
        )


def last_runs(sessions: Sessions) -> dict[tuple[str, str], dict[str, Any]]:
    """Every (task, host) record, as plain dicts."""
    with sessions() as session:
        rows = session.scalars(select(PeriodicTaskRun)).all()
        return {(r.task_name, r.host): run_dict(r) for r in rows}


def run_dict(row: PeriodicTaskRun) -> dict[str, Any]:
    def iso(value: dt.datetime | None) -> str | None:
        return value.isoformat() if value else None

    return {
        "task": row.task_name,
        "host": row.host,
        "running": row.running_since is not None,
        "last_started_at": iso(row.last_started_at),
        "last_finished_at": iso(row.last_finished_at),
        "last_status": row.last_status,
        "last_result": row.last_result,
        "last_error": row.last_error,
        "run_count": row.run_count,
        "skip_count": row.skip_count,
    }
