"""Nova's ``_cleanup_running_deleted_instances`` (NOVA_BEHAVIOUR.md §7.2).

The guests this hypervisor still has whose instance row is deleted (``deleted != 0``, not
SOFT_DELETED) since longer than ``running_deleted_instance_timeout`` seconds (or with no
``deleted_at``), handled per
``running_deleted_instance_action``: ``reap`` destroys the guest and its instance files,
``shutdown`` powers it off, ``log`` warns, ``noop`` does nothing. As Nova's, it only
looks at guests with a (deleted) instance row: a guest with no row at all is an orphan,
counted as used by ``update_available_resource`` and reported by ``novaq audit``, never
destroyed here.

A reaped guest may have been counted as an orphan by ``update_available_resource``
meanwhile; that count goes in the same pass (``compute.heal.release_destroyed_orphan``).

Deliberate difference from Nova: Nova's ``reap`` also detaches volumes and unplugs VIFs,
novaq has neither.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.build import instance_name
from compute.claims import retry_on_conflict
from compute.delete import record_clean_attempt
from compute.heal import release_destroyed_orphan
from compute.periodic import PeriodicContext
from compute.sessions import Sessions
from compute.states import VmState
from models import Instance, utcnow
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunningDeleted:
    uuid: str
    name: str
    deleted_at: dt.datetime | None


def cleanup_running_deleted_instances(ctx: PeriodicContext) -> dict[str, Any]:
    """One pass of Nova's ``_cleanup_running_deleted_instances`` on ``ctx.host``."""
    action = ctx.settings.running_deleted_instance_action
    if action == "noop":
        return {"action": action, "instances": [], "failed": []}
    found = running_deleted_instances(
        ctx.sessions, ctx.hypervisor, ctx.settings.running_deleted_instance_timeout
    )
    handle = _ACTIONS[action]
    failed = [item.uuid for item in found if not handle(ctx.hypervisor, item)]
    if action == "reap":
        _record_cleanups(ctx, [item.uuid for item in found if item.uuid not in failed])
    return {"action": action, "instances": [item.uuid for item in found], "failed": failed}


def _record_cleanups(ctx: PeriodicContext, uuids: list[str]) -> None:
    """A reap removed the instance files too: count it as Nova's cleanup does, so
    ``_run_pending_deletes`` has nothing left to do for these. And the reaped guest may
    have been counted as an orphan by ``update_available_resource``: that count goes now,
    not at the next pass."""
    for uuid in uuids:
        gone = not ctx.hypervisor.instance_files_exist(uuid)

        def work(session: Session, uuid: str = uuid, gone: bool = gone) -> None:
            instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).first()
            if instance is not None and not instance.cleaned:
                record_clean_attempt(instance, gone)
            release_destroyed_orphan(session, ctx.host, uuid)

        retry_on_conflict(ctx.sessions, work)


def running_deleted_instances(
    sessions: Sessions, driver: ComputeDriver, timeout_s: int
) -> list[RunningDeleted]:
    """Guests of ``driver`` whose instance row is deleted (not SOFT_DELETED) for more
    than ``timeout_s`` seconds, or with no ``deleted_at`` (Nova's ``_deleted_old_enough``)."""
    guests = driver.list_instance_uuids()
    if not guests:
        return []  # as Nova: no database call for an empty hypervisor
    cutoff = utcnow() - dt.timedelta(seconds=timeout_s)
    with sessions() as session:
        rows = session.scalars(
            select(Instance)
            .where(
                Instance.uuid.in_(guests),
                Instance.deleted != 0,
                Instance.vm_state != VmState.SOFT_DELETED,
            )
            .order_by(Instance.id)
        ).all()
        return [
            RunningDeleted(row.uuid, instance_name(row), row.deleted_at)
            for row in rows
            if row.deleted_at is None or row.deleted_at < cutoff
        ]


def _log_only(driver: ComputeDriver, item: RunningDeleted) -> bool:
    LOG.warning(
        "[instance: %s] Detected instance with name label '%s' which is marked as DELETED "
        "but still present on host.",
        item.uuid,
        item.name,
    )
    return True


def _shutdown(driver: ComputeDriver, item: RunningDeleted) -> bool:
    LOG.info(
        "[instance: %s] Powering off instance with name label '%s' which is marked as DELETED "
        "but still present on host.",
        item.uuid,
        item.name,
    )
    try:
        driver.power_off(item.uuid)
    except Exception:  # noqa: BLE001 - tried again next pass
        LOG.warning("Failed to power off instance %s", item.uuid, exc_info=True)
        return False
    return True


def _reap(driver: ComputeDriver, item: RunningDeleted) -> bool:
    LOG.info(
        "[instance: %s] Destroying instance with name label '%s' which is marked as DELETED "
        "but still present on host.",
        item.uuid,
        item.name,
    )
    try:
        driver.destroy(item.uuid)  # powers the guest off first
        # Nova's _shutdown_instance destroys with its disks; novaq's destroy keeps the
        # files (a move needs them), so they go explicitly.
        driver.delete_instance_files(item.uuid)
    except Exception as exc:  # noqa: BLE001 - tried again next pass
        LOG.warning("Periodic cleanup failed to delete instance %s: %s", item.uuid, exc)
        return False
    return True


_ACTIONS: dict[str, Callable[[ComputeDriver, RunningDeleted], bool]] = {
    "log": _log_only,
    "shutdown": _shutdown,
    "reap": _reap,
}
