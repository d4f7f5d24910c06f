"""``_heal_instance_info_cache``: refresh the cached device info of one instance per run,
rotating through the instances of this host (Nova's
``ComputeManager._heal_instance_info_cache``).

Nova caches each instance's network info (from Neutron) and force-refreshes one instance
per run. novaq has no network service: ``instance_info_caches.device_info`` holds what the
hypervisor says the guest is attached to, read from its domain XML
(``ComputeDriver.guest_devices``): disks (target dev, source path, bus), PCI passthrough
addresses, consoles.

Rotation: Nova keeps the uuids still to heal in the manager's memory and rebuilds the list
when it runs dry. novaq's runs land on any worker thread or process, so "next" comes from
the database instead: the eligible instance whose cache was refreshed longest ago, those
never refreshed first (then by id). Each run stamps its instance's cache, so N runs
refresh each of N instances once, as Nova's list does, and a new instance is picked up at
the next run rather than at the next rebuild of the list.

Eligible, as in Nova: instances of this host (Nova's "migrated to another host" check),
not deleted, not BUILDING (they are picked up once built) and not being deleted. novaq
also skips an instance moving away (``resize_migrating``, ``resize_migrated``,
``migrating``): its guest is being taken down here. A run that cannot read the guest
(gone, hypervisor error) logs it as Nova does and stamps the cache without changing what
it holds, so the rotation moves on.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from compute.periodic import PeriodicContext
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from models import Instance, InstanceInfoCache, utcnow
from novaq.exceptions import DomainNotFound, HypervisorError

LOG = logging.getLogger(__name__)

SKIPPED_TASK_STATES = (
    TaskState.DELETING,
    TaskState.RESIZE_MIGRATING,
    TaskState.RESIZE_MIGRATED,
    TaskState.MIGRATING,
)


def next_instance_to_heal(session: Session, host: str) -> str | None:
    """The eligible instance of ``host`` whose cache is the oldest (or missing)."""
    query = (
        select(Instance.uuid)
        .outerjoin(InstanceInfoCache, InstanceInfoCache.instance_uuid == Instance.uuid)
        .where(
            Instance.host == host,
            Instance.deleted == 0,
            Instance.vm_state != VmState.BUILDING,
            or_(Instance.task_state.is_(None), Instance.task_state.not_in(SKIPPED_TASK_STATES)),
        )
        .order_by(
            InstanceInfoCache.updated_at.is_not(None),
            InstanceInfoCache.updated_at,
            Instance.id,
        )
        .limit(1)
    )
    uuid: str | None = session.scalar(query)
    return uuid


def _write_cache(session: Session, uuid: str, device_info: dict[str, Any] | None) -> None:
    """Store ``device_info`` (None: keep what is cached) and stamp the refresh."""
    row = session.scalars(
        select(InstanceInfoCache).where(InstanceInfoCache.instance_uuid == uuid)
    ).first()
    if row is None:
        row = InstanceInfoCache(instance_uuid=uuid, device_info={})
        session.add(row)
    if device_info is not None:
        row.device_info = device_info
    row.updated_at = utcnow()


def write_cache(sessions: Sessions, uuid: str, device_info: dict[str, Any] | None) -> None:
    try:
        with sessions() as session:
            _write_cache(session, uuid, device_info)
    except IntegrityError:
        # Another writer created the row first: it exists now, so update it.
        with sessions() as session:
            _write_cache(session, uuid, device_info)


def _read_devices(ctx: PeriodicContext, uuid: str) -> dict[str, Any] | None:
    try:
        return ctx.hypervisor.guest_devices(uuid)
    except DomainNotFound:
        LOG.debug("Instance %s no longer exists on %s. Unable to refresh", uuid, ctx.host)
    except HypervisorError:
        LOG.error(
            "An error occurred while refreshing the info cache of %s on %s",
            uuid,
            ctx.host,
            exc_info=True,
        )
    return None


def heal_instance_info_cache(ctx: PeriodicContext) -> dict[str, Any]:
    """Refresh the next instance's cache from the hypervisor."""
    LOG.debug("Starting heal instance info cache")
    with ctx.sessions() as session:
        uuid = next_instance_to_heal(session, ctx.host)
    if uuid is None:
        LOG.debug("Didn't find any instances for info cache update on %s.", ctx.host)
        return {"instance": None}
    device_info = _read_devices(ctx, uuid)
    write_cache(ctx.sessions, uuid, device_info)
    if device_info is not None:
        LOG.debug("Updated the info_cache for instance %s on %s", uuid, ctx.host)
    return {"instance": uuid, "refreshed": device_info is not None}
