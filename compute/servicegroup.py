"""Services and their liveness (Nova's servicegroup ``db`` driver).

A service is up while its last heartbeat is younger than ``service_down_time`` (the
absolute difference, so clock skew either way is tolerated) and it is not forced down.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import Update, bindparam, event, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from models import Service, ServiceLiveness, utcnow
from models.db import liveness_write
from novaq.exceptions import ComputeHostNotFound, InvalidInput, NotFound
from novaq.settings import Settings

LOG = logging.getLogger(__name__)

COMPUTE = "novaq-compute"
SCHEDULER = "novaq-scheduler"


def register_service(
    session: Session,
    host: str,
    binary: str,
    topic: str,
    settings: Settings,
    disk_endpoint: str | None = None,
) -> Service:
    """Create the service row, or revive the existing one (same host and binary), and
    count the report: its liveness row (``models.liveness``) is written once the
    transaction has committed, so it never names a service that was rolled back.
    ``disk_endpoint`` replaces what a former process published (None clears it)."""
    service = session.scalars(
        select(Service).where(Service.host == host, Service.binary == binary, Service.deleted == 0)
    ).first()
    now = utcnow()
    reports = 1 if service is None else (service.report_count or 0) + 1
    if service is None:
        service = Service(
            host=host,
            binary=binary,
            topic=topic,
            disabled=not settings.enable_new_services,
            disabled_reason=None if settings.enable_new_services else "New service disabled",
        )
        session.add(service)
    service.topic = topic
    service.disk_endpoint = disk_endpoint
    service.updated_at = now
    session.flush()
    # What the liveness row will hold, as the loaded row's (read-only) attributes.
    set_committed_value(service, "report_count", reports)
    set_committed_value(service, "last_seen_up", now)
    url = session.get_bind().engine.url.render_as_string(hide_password=False)
    params = {"service": service.id, "reports": reports, "now": now}
    event.listen(session, "after_commit", lambda _s: _report(url, _REGISTERED, params), once=True)
    return service


#: A heartbeat's UPDATE, built once: a statement built at each heartbeat (its clauses
#: coerced, then its cache key generated again at the execution) was three quarters of the
#: heartbeat's CPU (~450 of ~600 µs), and under load every millisecond of CPU is one more
#: chance to wait for a core.
_HEARTBEAT = (
    update(ServiceLiveness)
    .where(ServiceLiveness.service_id == bindparam("service"))
    .values(report_count=ServiceLiveness.report_count + 1, last_seen_up=bindparam("now"))
)
#: A registration's report: the count set, the row made if missing.
_REGISTERED = (
    update(ServiceLiveness)
    .where(ServiceLiveness.service_id == bindparam("service"))
    .values(report_count=bindparam("reports"), last_seen_up=bindparam("now"))
)
_FIRST_REPORT = insert(ServiceLiveness).values(
    service_id=bindparam("service"),
    report_count=bindparam("reports"),
    last_seen_up=bindparam("now"),
)


def heartbeat(db_url: str, service_id: int) -> None:
    """One report: bump ``report_count`` and stamp ``last_seen_up``, in one UPDATE of the
    liveness table (``models.db.liveness_write``: on SQLite a file of its own, so the
    writers' transactions, whose waits would make a busy host look down, never hold it
    up). A row found missing (a liveness file lost) is made again."""
    _report(db_url, _HEARTBEAT, {"service": service_id, "now": utcnow(), "reports": 1})


def _report(db_url: str, update_row: Update, params: dict[str, object]) -> None:
    """``update_row`` of the service's liveness row, or its first report (``params``'
    ``reports``) when it has none."""
    if not liveness_write(db_url, update_row, params):
        liveness_write(db_url, _FIRST_REPORT, params)


def is_up(service: Service, settings: Settings, now: dt.datetime | None = None) -> bool:
    if service.forced_down:
        return False
    last = service.last_seen_up or service.created_at
    elapsed = abs(((now or utcnow()) - last).total_seconds())
    return elapsed <= settings.effective_service_down_time


def service_dict(service: Service, settings: Settings) -> dict[str, object]:
    return {
        "id": service.id,
        "host": service.host,
        "binary": service.binary,
        "status": "disabled" if service.disabled else "enabled",
        "disabled_reason": service.disabled_reason,
        "state": "up" if is_up(service, settings) else "down",
        "up": is_up(service, settings),
        "forced_down": service.forced_down,
        "report_count": service.report_count,
        "last_seen_up": service.last_seen_up.isoformat() if service.last_seen_up else None,
    }


def disk_endpoint_of(session: Session, host: str) -> str | None:
    """The disk endpoint compute host ``host`` publishes now (None: none, or no such
    service)."""
    return session.scalars(
        select(Service.disk_endpoint).where(
            Service.host == host, Service.binary == COMPUTE, Service.deleted == 0
        )
    ).first()


class ServiceNotFound(NotFound):
    msg_fmt = "Service %(binary)s on host %(host)s could not be found."


def get_service(session: Session, host: str, binary: str = COMPUTE) -> Service:
    service = session.scalars(
        select(Service).where(Service.host == host, Service.binary == binary, Service.deleted == 0)
    ).first()
    if service is None and binary == COMPUTE:
        # Nova (2.56+) names the host: an unknown compute host is ComputeHostNotFound.
        raise ComputeHostNotFound(host=host)
    if service is None:
        raise ServiceNotFound(host=host, binary=binary)
    return service


MAX_REASON = 255


def set_disabled(
    session: Session, host: str, disabled: bool, reason: str | None, binary: str = COMPUTE
) -> Service:
    """Nova's ``PUT /os-services``: disable (with an optional reason) or enable a service.
    A reason is only accepted when disabling; enabling clears it."""
    if reason is not None and not disabled:
        raise InvalidInput(reason="a disabled reason is only accepted when disabling")
    if reason is not None and not (0 < len(reason.strip()) <= MAX_REASON):
        raise InvalidInput(reason=f"disabled reason must be 1 to {MAX_REASON} characters")
    service = get_service(session, host, binary)
    service.disabled = disabled
    service.disabled_reason = reason.strip() if disabled and reason else None
    service.updated_at = utcnow()
    LOG.info(
        "Service %s on %s %s%s",
        binary,
        host,
        "disabled" if disabled else "enabled",
        f" ({service.disabled_reason})" if service.disabled_reason else "",
    )
    return service


def set_forced_down(session: Session, host: str, forced_down: bool) -> Service:
    """Nova's ``forced_down``: the operator says a compute host is down (fenced) without
    waiting for ``service_down_time``; only compute services can be forced down."""
    service = get_service(session, host, COMPUTE)
    service.forced_down = forced_down
    service.updated_at = utcnow()
    LOG.info("Service %s on %s forced_down=%s", COMPUTE, host, forced_down)
    return service
