"""Soft delete, restore and the reclaim of soft-deleted instances on a compute host
(NOVA_BEHAVIOUR.md §2.2): Nova's ``soft_delete_instance``, ``restore_instance`` and
``_reclaim_queued_deletes``.

soft delete and restore are one step each, written as the power operations of
``compute/lifecycle.py``: libvirt implements neither, so, as Nova falls back, soft
delete powers the guest off (``soft-deleting`` → SOFT_DELETED) and restore powers it on
(``restoring`` → ACTIVE). The allocations stay: a soft-deleted server still consumes.
A failure is ``reverts_task_state`` + fault.

The reclaim hard-deletes, as ``terminate_instance`` does, the instances of a host that
have been SOFT_DELETED (task None) for longer than ``reclaim_instance_interval``.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.claims import retry_on_conflict
from compute.delete import release_and_mark
from compute.instance_state import cas_update
from compute.lifecycle import host_step
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from compute.steps import StepContext, run_step, to
from models import Instance, utcnow
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from novaq.settings import Settings
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

SOFT_DELETE = host_step(
    "soft_delete",
    TaskState.SOFT_DELETING,
    lambda ctx, run: ctx.driver.power_off(run.instance_uuid),
    to(VmState.SOFT_DELETED),
)
RESTORE = host_step(
    "restore",
    TaskState.RESTORING,
    lambda ctx, run: ctx.driver.power_on(run.instance_uuid),
    to(VmState.ACTIVE),
)


def soft_delete_instance(ctx: StepContext, instance_uuid: str) -> str:
    """``soft-deleting`` → SOFT_DELETED, the guest powered off (kept, and its claim)."""
    return run_step(ctx, SOFT_DELETE, instance_uuid)


def restore_instance(ctx: StepContext, instance_uuid: str) -> str:
    """``restoring`` → ACTIVE, the guest powered back on."""
    return run_step(ctx, RESTORE, instance_uuid)


def reclaim_queued_deletes(
    sessions: Sessions, driver: ComputeDriver, host: str, settings: Settings
) -> list[str]:
    """Hard-delete this host's instances soft-deleted more than
    ``reclaim_instance_interval`` seconds ago (none when the interval is <= 0). Returns
    the uuids deleted. A failure is logged and the instance is tried again next run."""
    interval = settings.reclaim_instance_interval
    if interval <= 0:
        return []
    cutoff = utcnow() - dt.timedelta(seconds=interval)
    with sessions() as session:
        due = list(
            session.scalars(
                select(Instance.uuid)
                .where(
                    Instance.host == host,
                    Instance.deleted == 0,
                    Instance.vm_state == VmState.SOFT_DELETED,
                    Instance.task_state.is_(None),
                    Instance.deleted_at.is_not(None),
                    Instance.deleted_at < cutoff,
                )
                .order_by(Instance.id)
            )
        )
    reclaimed = []
    for uuid in due:
        try:
            if _reclaim(sessions, driver, uuid, host):
                reclaimed.append(uuid)
        except Exception:  # noqa: BLE001 - the next run tries again, the others go on
            LOG.exception("Instance %s on %s: reclaim failed", uuid, host)
    return reclaimed


def _reclaim(sessions: Sessions, driver: ComputeDriver, instance_uuid: str, host: str) -> bool:
    # NOTE: Nova changes no task_state here; ``deleting`` is taken first so a restore
    # racing the reclaim is refused instead of powering on a guest being destroyed.
    try:
        with sessions() as session:
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[None],
                expected_vm_state=[VmState.SOFT_DELETED],
                task_state=TaskState.DELETING,
            )
    except (UnexpectedTaskStateError, InstanceNotFound):
        return False
    try:
        driver.destroy(instance_uuid)
        files_deleted = driver.delete_instance_files(instance_uuid)
    except Exception:
        with sessions() as session:
            cas_update(
                session, instance_uuid, expected_task_state=[TaskState.DELETING], task_state=None
            )
        raise

    def work(session: Session) -> None:
        release_and_mark(session, instance_uuid, files_deleted)

    retry_on_conflict(sessions, work)
    LOG.info("Instance %s on %s: reclaimed (soft delete expired)", instance_uuid, host)
    return True
