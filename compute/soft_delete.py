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
from compute.delete import _release_and_mark
from compute.instance_state import cas_update
from compute.lifecycle import Operation, _keep_vm_state, _op, _run
from compute.states import TaskState, VmState
from models import Instance, utcnow
from models.db import session_scope
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from novaq.settings import Settings
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

SOFT_DELETE = _op("soft_delete", TaskState.SOFT_DELETING, _keep_vm_state)
RESTORE = _op("restore", TaskState.RESTORING, _keep_vm_state)
OPERATIONS: dict[str, Operation] = {op.name: op for op in (SOFT_DELETE, RESTORE)}


def soft_delete_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    """``soft-deleting`` → SOFT_DELETED, the guest powered off (kept, and its claim)."""
    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        SOFT_DELETE,
        lambda: driver.power_off(instance_uuid),
        lambda instance: {"vm_state": VmState.SOFT_DELETED},
    )


def restore_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    """``restoring`` → ACTIVE, the guest powered back on."""
    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        RESTORE,
        lambda: driver.power_on(instance_uuid),
        lambda instance: {"vm_state": VmState.ACTIVE},
    )


def reclaim_queued_deletes(
    db_url: str, driver: ComputeDriver, host: str, settings: Settings
) -> list[str]:
    """Hard-delete this host's instances soft-deleted more than
    ``reclaim_instance_interval`` seconds ago (none when the interval is <= 0). Returns
    the uuids deleted. A failure is logged and the instance is tried again next run."""
    interval = settings.reclaim_instance_interval
    if interval <= 0:
        return []
    cutoff = utcnow() - dt.timedelta(seconds=interval)
    with session_scope(db_url) as session:
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
            if _reclaim(db_url, driver, uuid, host):
                reclaimed.append(uuid)
        except Exception:  # noqa: BLE001 - the next run tries again, the others go on
            LOG.exception("Instance %s on %s: reclaim failed", uuid, host)
    return reclaimed


def _reclaim(db_url: str, driver: ComputeDriver, instance_uuid: str, host: str) -> bool:
    # NOTE: Nova changes no task_state here; ``deleting`` is taken first so a restore
    # racing the reclaim is refused instead of powering on a guest being destroyed.
    try:
        with session_scope(db_url) as session:
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
        with session_scope(db_url) as session:
            cas_update(
                session, instance_uuid, expected_task_state=[TaskState.DELETING], task_state=None
            )
        raise

    def work(session: Session) -> None:
        _release_and_mark(session, instance_uuid, files_deleted)

    retry_on_conflict(db_url, work)
    LOG.info("Instance %s on %s: reclaimed (soft delete expired)", instance_uuid, host)
    return True
