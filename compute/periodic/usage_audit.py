"""``_instance_usage_audit``: once per audit period and host, an ``instance.exists``
notification for every instance of the host that was active in the period, recorded in
``task_log`` (Nova's ``ComputeManager._instance_usage_audit``).

The period is the last *completed* one of ``instance_usage_audit_period``: ``hour``,
``day``, ``month`` or ``year``, optionally ``@offset`` saying where periods start (the
minute of the hour, the hour of the day, the day of the month, the month of the year;
``month@15`` runs from the 15th to the 15th). Same semantics as Nova's
``nova.utils.last_completed_audit_period``, including its ``>=``: a period that ends
exactly now is not completed yet.

The ``task_log`` row (``instance_usage_audit``, host, period) makes the job run once per
period whatever the spacing: a run that finds it does nothing; otherwise the row is
inserted RUNNING, the notifications go out, and it ends DONE with ``task_items``,
``errors`` and Nova's message. As in Nova, a row left RUNNING by a crashed run is not
retried. "Active in the period" is Nova's ``InstanceList.get_active_by_window_joined``:
launched before the period ended and not terminated (deleted) before it began.

Deliberate differences from Nova:

- ``month@N`` with N past a month's last day starts that month's period on its last day
  (Nova raises ``ValueError`` in short months); an offset out of range (``hour@60``,
  ``day@24``, ``month@32``, ``year@13``) is a ``ConfigError`` instead of a crash.
- two runs racing to insert the same row do not crash: the loser does nothing, as if it
  had found the row (the periodic lease already keeps runs on one host apart).
"""

from __future__ import annotations

import calendar
import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from compute import notifications
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from compute.sessions import Sessions
from models import Instance, TaskLog, utcnow
from novaq.exceptions import ConfigError

LOG = logging.getLogger(__name__)

TASK_NAME = "instance_usage_audit"
RUNNING, DONE = "RUNNING", "DONE"
EXISTS_EVENT = "instance.exists"

# -- the audit period ---------------------------------------------------------------

Boundary = Callable[[dt.datetime, int], dt.datetime]


def _hour_boundary(now: dt.datetime, minute: int) -> dt.datetime:
    return now.replace(minute=minute, second=0, microsecond=0)


def _hour_before(end: dt.datetime, minute: int) -> dt.datetime:
    return end - dt.timedelta(hours=1)


def _day_boundary(now: dt.datetime, hour: int) -> dt.datetime:
    return now.replace(hour=hour, minute=0, second=0, microsecond=0)


def _day_before(end: dt.datetime, hour: int) -> dt.datetime:
    return end - dt.timedelta(days=1)


def _month_start(year: int, month: int, day: int) -> dt.datetime:
    # NOTE: clamped to the month's last day (month@31 in February), where Nova crashes.
    return dt.datetime(year, month, min(day, calendar.monthrange(year, month)[1]))


def _month_boundary(now: dt.datetime, day: int) -> dt.datetime:
    return _month_start(now.year, now.month, day or 1)


def _month_before(end: dt.datetime, day: int) -> dt.datetime:
    year, month = (end.year - 1, 12) if end.month == 1 else (end.year, end.month - 1)
    return _month_start(year, month, day or 1)


def _year_boundary(now: dt.datetime, month: int) -> dt.datetime:
    return dt.datetime(now.year, month or 1, 1)


def _year_before(end: dt.datetime, month: int) -> dt.datetime:
    return dt.datetime(end.year - 1, month or 1, 1)


#: unit -> (the period boundary in the current unit, the boundary one period earlier,
#: the largest offset)
_UNITS: dict[str, tuple[Boundary, Boundary, int]] = {
    "hour": (_hour_boundary, _hour_before, 59),
    "day": (_day_boundary, _day_before, 23),
    "month": (_month_boundary, _month_before, 31),
    "year": (_year_boundary, _year_before, 12),
}


def parse_audit_period(period: str) -> tuple[str, int]:
    """``"month@15"`` -> ``("month", 15)``; ConfigError if the unit or offset is invalid."""
    unit, _, offset_text = period.partition("@")
    if unit not in _UNITS or (offset_text and not offset_text.isdigit()):
        raise ConfigError(option="instance_usage_audit_period", reason=f"{period!r} is invalid")
    offset = int(offset_text or 0)
    if offset > _UNITS[unit][2]:
        raise ConfigError(
            option="instance_usage_audit_period",
            reason=f"offset {offset} of {period!r} is above {_UNITS[unit][2]}",
        )
    return unit, offset


def last_completed_audit_period(
    period: str, before: dt.datetime | None = None
) -> tuple[dt.datetime, dt.datetime]:
    """(begin, end) of the last period of ``period`` completed before ``before`` (naive
    UTC, default now); the next period begins where this one ends."""
    unit, offset = parse_audit_period(period)
    boundary, previous, _ = _UNITS[unit]
    now = before if before is not None else utcnow()
    end = boundary(now, offset)
    if end >= now:
        end = previous(end, offset)
    return previous(end, offset), end


# -- the audit ----------------------------------------------------------------------


def active_instances(
    session: Session, host: str, begin: dt.datetime, end: dt.datetime
) -> list[str]:
    """Uuids of the instances of ``host`` active in [begin, end): launched before ``end``
    and not terminated before ``begin``; deleted ones included (they existed)."""
    query = (
        select(Instance.uuid)
        .where(
            Instance.host == host,
            Instance.launched_at < end,
            or_(Instance.terminated_at.is_(None), Instance.terminated_at > begin),
        )
        .order_by(Instance.id)
    )
    return list(session.scalars(query))


def _task_log_exists(session: Session, host: str, begin: dt.datetime, end: dt.datetime) -> bool:
    query = select(TaskLog.id).where(
        TaskLog.task_name == TASK_NAME,
        TaskLog.host == host,
        TaskLog.period_beginning == begin,
        TaskLog.period_ending == end,
    )
    return session.scalar(query) is not None


def begin_task(
    sessions: Sessions, host: str, begin: dt.datetime, end: dt.datetime, items: int
) -> bool:
    """Insert the RUNNING row; False if another run inserted it first (Nova's
    ``TaskAlreadyRunning``)."""
    row = TaskLog(
        task_name=TASK_NAME,
        state=RUNNING,
        host=host,
        period_beginning=begin,
        period_ending=end,
        task_items=items,
        message="Instance usage audit started...",
    )
    try:
        with sessions() as session:
            session.add(row)
    except IntegrityError:
        return False
    return True


def end_task(
    session: Session, host: str, begin: dt.datetime, end: dt.datetime, errors: int, message: str
) -> None:
    session.execute(
        update(TaskLog)
        .where(
            TaskLog.task_name == TASK_NAME,
            TaskLog.host == host,
            TaskLog.period_beginning == begin,
            TaskLog.period_ending == end,
        )
        .values(state=DONE, errors=errors, message=message, updated_at=utcnow())
    )


def _iso(value: dt.datetime) -> str:
    return value.replace(tzinfo=dt.UTC).isoformat()


def exists_payload(
    session: Session, instance: Instance, begin: dt.datetime, end: dt.datetime
) -> dict[str, Any]:
    """Nova's ``InstanceExistsPayload``: the instance payload plus its audit period."""
    data = dict(notifications.instance_payload(session, instance, None)["nova_object.data"])
    data.pop("fault", None)  # an InstancePayload, not an InstanceActionPayload
    data["audit_period"] = {
        "nova_object.name": "AuditPeriodPayload",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.0",
        "nova_object.data": {
            "audit_period_beginning": _iso(begin),
            "audit_period_ending": _iso(end),
        },
    }
    return {
        "nova_object.name": "InstanceExistsPayload",
        "nova_object.namespace": "nova",
        "nova_object.version": "2.1",
        "nova_object.data": data,
    }


def _notify_exists(
    sessions: Sessions, uuid: str, host: str, begin: dt.datetime, end: dt.datetime
) -> bool:
    """Send one ``instance.exists``; False (logged) if it could not be built or sent."""
    try:
        with sessions() as session:
            payload = exists_payload(session, get_instance(session, uuid), begin, end)
    except Exception:  # noqa: BLE001 - counted in task_log.errors, as Nova does
        LOG.exception("Failed to generate usage audit for instance %s on host %s", uuid, host)
        return False
    return notifications.publish(EXISTS_EVENT, payload, host)


def instance_usage_audit(ctx: PeriodicContext) -> dict[str, Any]:
    """One audit of ``ctx.host`` for the last completed period, unless already done."""
    begin, end = last_completed_audit_period(ctx.settings.instance_usage_audit_period)
    period = [begin.isoformat(), end.isoformat()]
    with ctx.sessions() as session:
        if _task_log_exists(session, ctx.host, begin, end):
            return {"period": period, "skipped": "already audited"}
        uuids = active_instances(session, ctx.host, begin, end)
    LOG.info(
        "Running instance usage audit for host %s from %s to %s. %s instances.",
        ctx.host,
        begin,
        end,
        len(uuids),
    )
    start = time.time()
    if not begin_task(ctx.sessions, ctx.host, begin, end, len(uuids)):
        LOG.info("Instance usage audit of %s for %s-%s is already running", ctx.host, begin, end)
        return {"period": period, "skipped": "already audited"}
    errors = sum(not _notify_exists(ctx.sessions, u, ctx.host, begin, end) for u in uuids)
    message = (
        f"Instance usage audit ran for host {ctx.host}, {len(uuids)} instances "
        f"in {time.time() - start} seconds."
    )
    with ctx.sessions() as session:
        end_task(session, ctx.host, begin, end, errors, message)
    return {"period": period, "instances": uuids, "errors": errors}
