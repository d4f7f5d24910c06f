"""What a compute host does at start for work a crash interrupted (Nova's ``init_host``).

- A build that had started on this host (``spawning``) is errored out as Nova does: its
  guest destroyed, its claim released, a fault saying the build was interrupted. A build
  whose message is still queued (``scheduling`` with this host chosen) is left to it.
- A delete in progress (``deleting``) is completed.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from compute.build import fail_build
from compute.delete import terminate_instance
from compute.states import TaskState, VmState
from models import Instance
from models.db import session_scope
from novaq.exceptions import BuildAbortError
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

INTERRUPTED_BUILD = (TaskState.SPAWNING, TaskState.NETWORKING, TaskState.BLOCK_DEVICE_MAPPING)
RECOVERY_REQUEST = "req-init-host"


def recover_host(db_url: str, driver: ComputeDriver, host: str) -> list[str]:
    """Recover every instance of ``host`` left mid-operation; returns what was done."""
    with session_scope(db_url) as session:
        rows = session.execute(
            select(Instance.uuid, Instance.vm_state, Instance.task_state).where(
                Instance.host == host, Instance.deleted == 0, Instance.task_state.is_not(None)
            )
        ).all()
    done = []
    for uuid, vm_state, task_state in rows:
        if vm_state == VmState.BUILDING and task_state in INTERRUPTED_BUILD:
            _destroy_quietly(driver, uuid)
            error = BuildAbortError(uuid=uuid, reason=f"interrupted by a restart of {host}")
            if fail_build(
                db_url, uuid, RECOVERY_REQUEST, error, host=host, event="compute_init_host"
            ):
                done.append(f"{uuid}: interrupted build -> ERROR")
        elif task_state == TaskState.DELETING:
            terminate_instance(db_url, driver, uuid, _last_request(db_url, uuid), host)
            done.append(f"{uuid}: interrupted delete completed")
    for line in done:
        LOG.warning("init_host on %s: %s", host, line)
    return done


def _last_request(db_url: str, uuid: str) -> str:
    from models import InstanceAction

    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction)
            .where(InstanceAction.instance_uuid == uuid)
            .order_by(InstanceAction.id.desc())
        ).first()
        return action.request_id if action else RECOVERY_REQUEST


def _destroy_quietly(driver: ComputeDriver, uuid: str) -> None:
    try:
        driver.destroy(uuid)
    except Exception:  # noqa: BLE001 - recovery goes on with the other instances
        LOG.exception("init_host: could not destroy the guest of %s", uuid)
