"""``_poll_volume_usage``: every guest disk's block I/O counters, read from the hypervisor
into ``volume_usage_cache``, and one ``volume.usage`` notification per disk (Nova's
``ComputeManager._poll_volume_usage`` with ``nova.db.main.api.vol_usage_update``).

novaq has no volume service, so a guest's own disks are its volumes: a disk's row has
volume_id ``<instance uuid>/<target dev>`` (``…/vda``). Nova's counter semantics: ``curr_*``
are the latest counters the hypervisor reported, which count from the guest's start; when
one of them goes backwards the guest was restarted (or moved), so the previous ``curr_*``
are first added to ``tot_*``. Usage so far is ``tot_* + curr_*``, which the notification
carries (Nova's ``VolumeUsagePayload``).

Deliberate differences from Nova:

- Nova polls the volume block device mappings of the host's instances; novaq every disk of
  every guest of this host (instances with ``host`` = this host, not deleted) that the
  hypervisor has.
- A guest that is not running has no counters (libvirt keeps them only for a live domain):
  its rows stay as they are; its next, lower, reading folds them into the totals.
- No legacy unversioned ``volume.usage`` (novaq sends versioned notifications only).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from compute import notifications
from compute.periodic import PeriodicContext
from compute.sessions import Sessions
from models import Instance, VolumeUsage, utcnow
from novaq.exceptions import DomainNotFound, HypervisorError
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

USAGE_EVENT = "volume.usage"
#: hypervisor counter -> the cache column suffix (``curr_reads``, ``tot_reads``…)
COUNTERS = {
    "rd_req": "reads",
    "rd_bytes": "read_bytes",
    "wr_req": "writes",
    "wr_bytes": "write_bytes",
}


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """One disk's counters as the hypervisor reported them, in cache terms."""

    volume_id: str
    instance_uuid: str
    reads: int
    read_bytes: int
    writes: int
    write_bytes: int

    @classmethod
    def from_stats(cls, instance_uuid: str, dev: str, stats: dict[str, int]) -> DiskUsage:
        values = {column: int(stats[counter]) for counter, column in COUNTERS.items()}
        return cls(volume_id=f"{instance_uuid}/{dev}", instance_uuid=instance_uuid, **values)


def _host_instances(session: Session, host: str) -> list[str]:
    query = select(Instance.uuid).where(Instance.host == host, Instance.deleted == 0)
    return list(session.scalars(query.order_by(Instance.id)))


def read_disk_usage(driver: ComputeDriver, uuid: str, host: str) -> list[DiskUsage]:
    """The guest's disks' counters; none if the hypervisor has no such running guest."""
    try:
        stats = driver.block_stats(uuid)
    except DomainNotFound:
        LOG.debug("Instance %s has no guest on host %s; no volume usage", uuid, host)
        return []
    except HypervisorError as exc:
        LOG.info("Getting block stats of instance %s on host %s failed: %s", uuid, host, exc)
        return []
    return [DiskUsage.from_stats(uuid, dev, counters) for dev, counters in sorted(stats.items())]


def _went_backwards(row: VolumeUsage, usage: DiskUsage) -> bool:
    return any(
        getattr(usage, column) < getattr(row, f"curr_{column}") for column in COUNTERS.values()
    )


def _fold_current_into_totals(row: VolumeUsage) -> None:
    LOG.info(
        "Volume(%s) has lower stats then what is in the database. Instance must have been "
        "rebooted or crashed. Updating totals.",
        row.volume_id,
    )
    for column in COUNTERS.values():
        total = getattr(row, f"tot_{column}") + getattr(row, f"curr_{column}")
        setattr(row, f"tot_{column}", total)


def record_usage(session: Session, usage: DiskUsage, host: str) -> tuple[VolumeUsage, bool]:
    """Nova's ``vol_usage_update`` (not updating totals): the row with ``usage`` as its
    current counters, and whether the old ones had to be folded into the totals first."""
    row = session.scalars(
        select(VolumeUsage).where(VolumeUsage.volume_id == usage.volume_id).with_for_update()
    ).first()
    folded = row is not None and _went_backwards(row, usage)
    if row is None:
        row = VolumeUsage(volume_id=usage.volume_id, **{f"tot_{c}": 0 for c in COUNTERS.values()})
        session.add(row)
    elif folded:
        _fold_current_into_totals(row)
    now = utcnow()
    for column in COUNTERS.values():
        setattr(row, f"curr_{column}", getattr(usage, column))
    row.instance_uuid, row.host = usage.instance_uuid, host
    row.curr_last_refreshed = row.updated_at = now
    session.flush()
    return row, folded


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def usage_payload(
    row: VolumeUsage,
    availability_zone: str | None,
    project_id: str | None = None,
    user_id: str | None = None,
) -> dict[str, Any]:
    """Nova's ``VolumeUsagePayload``: usage so far (totals plus current counters), with
    the server's zone and owner."""
    refreshed = [t for t in (row.tot_last_refreshed, row.curr_last_refreshed) if t is not None]
    data: dict[str, Any] = {
        "volume_id": row.volume_id,
        "project_id": project_id,
        "user_id": user_id,
        "availability_zone": availability_zone,
        "instance_uuid": row.instance_uuid,
        "last_refreshed": _iso(max(refreshed)) if refreshed else None,
    }
    for column in COUNTERS.values():
        data[column] = getattr(row, f"tot_{column}") + getattr(row, f"curr_{column}")
    return {
        "nova_object.name": "VolumeUsagePayload",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.0",
        "nova_object.data": data,
    }


def _update_cache(
    session: Session, uuid: str, host: str, usages: list[DiskUsage]
) -> tuple[list[dict[str, Any]], list[str]]:
    """Record one guest's disks in one transaction: (payloads to send, volumes folded)."""
    server = select(Instance.availability_zone, Instance.project_id, Instance.user_id)
    found = session.execute(server.where(Instance.uuid == uuid)).first()
    zone, project_id, user_id = found if found is not None else (None, None, None)
    payloads, folded = [], []
    for usage in usages:
        row, was_folded = record_usage(session, usage, host)
        payloads.append(usage_payload(row, zone, project_id, user_id))
        if was_folded:
            folded.append(row.volume_id)
    return payloads, folded


def _update_cache_once_more_on_race(
    sessions: Sessions, uuid: str, host: str, usages: list[DiskUsage]
) -> tuple[list[dict[str, Any]], list[str]]:
    try:
        with sessions() as session:
            return _update_cache(session, uuid, host, usages)
    except IntegrityError:
        # Another run inserted one of these rows first: it exists now, so update it.
        with sessions() as session:
            return _update_cache(session, uuid, host, usages)


def poll_volume_usage(ctx: PeriodicContext) -> dict[str, Any]:
    """One poll of every guest of ``ctx.host``."""
    LOG.debug("Updating volume usage cache")
    polled, disks, reset = [], 0, []
    with ctx.sessions() as session:
        uuids = _host_instances(session, ctx.host)
    for uuid in uuids:
        usages = read_disk_usage(ctx.hypervisor, uuid, ctx.host)
        if not usages:
            continue
        payloads, folded = _update_cache_once_more_on_race(ctx.sessions, uuid, ctx.host, usages)
        # NOTE: sent after the commit, so a reader of the notification finds the row.
        for payload in payloads:
            notifications.publish(USAGE_EVENT, payload, ctx.host)
        polled.append(uuid)
        disks += len(usages)
        reset += folded
    return {"instances": polled, "disks": disks, "reset": reset}
