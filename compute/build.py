"""Build on a compute host (Nova's ``build_and_run_instance``) and the undo of a build
that failed anywhere on its way (scheduler, compute, or a lost message).

The host was chosen and claimed by the scheduler; this module only spawns, records and,
on failure, compensates: destroy what was started, release the claim, ERROR + fault.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.claims import release_in_session, retry_on_conflict
from compute.instance_state import cas_update, get_instance
from compute.pci import held_devices
from compute.states import TaskState, VmState
from models import Instance, utcnow
from models.db import session_scope
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from virt.driver import ComputeDriver, GuestSpec

LOG = logging.getLogger(__name__)

BUILD_EVENT = "compute__do_build_and_run_instance"
SCHEDULE_EVENT = "conductor_schedule_and_build_instances"


def instance_name(instance: Instance) -> str:
    """Nova's default ``instance_name_template``: ``instance-%08x``."""
    return f"instance-{instance.id:08x}"


def guest_spec(instance: Instance, pci_addresses: tuple[str, ...] = ()) -> GuestSpec:
    flavor = instance.flavor
    return GuestSpec(
        uuid=instance.uuid,
        name=instance_name(instance),
        vcpus=flavor["vcpus"],
        memory_mb=flavor["memory_mb"],
        root_gb=flavor["root_gb"],
        ephemeral_gb=flavor.get("ephemeral_gb", 0),
        swap_mb=flavor.get("swap", 0),
        image=instance.image_ref,
        pci_addresses=pci_addresses,
    )


@dataclass(frozen=True, slots=True)
class BuildResult:
    instance_uuid: str
    outcome: str  # "active", "error", "skipped"
    host: str | None

    def to_dict(self) -> dict[str, str | None]:
        return {"instance_uuid": self.instance_uuid, "outcome": self.outcome, "host": self.host}


def build_and_run_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> BuildResult:
    """Spawn the claimed instance on this host. Idempotent under redelivery: a second
    delivery finds the state moved on and returns ``skipped``."""
    try:
        with session_scope(db_url) as session:
            instance = get_instance(session, instance_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.SCHEDULING, None],
                expected_vm_state=[VmState.BUILDING],
                task_state=TaskState.SPAWNING,
            )
            devices = held_devices(session, instance_uuid)
            spec = guest_spec(instance, tuple(d.address for d in devices))
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        LOG.info("Instance %s on %s: build skipped: %s", instance_uuid, host, exc)
        return BuildResult(instance_uuid, "skipped", host)

    with actions.event_reporter(
        db_url, instance_uuid, request_id, BUILD_EVENT, host, finish_action=True
    ):
        try:
            info = driver.spawn(spec)
        except Exception as exc:
            LOG.warning("Instance %s on %s: spawn failed: %s", instance_uuid, host, exc)
            _destroy_quietly(driver, instance_uuid)
            fail_build(db_url, instance_uuid, request_id, exc, host=host, record_event=False)
            raise
        try:
            with session_scope(db_url) as session:
                cas_update(
                    session,
                    instance_uuid,
                    expected_task_state=[TaskState.SPAWNING],
                    vm_state=VmState.ACTIVE,
                    task_state=None,
                    power_state=info.power_state,
                    launched_at=utcnow(),
                )
        except (UnexpectedTaskStateError, InstanceNotFound):
            # Deleted while spawning: the delete has released the claim; take the guest
            # back down so nothing runs for a server that no longer exists.
            LOG.info(
                "Instance %s deleted while spawning on %s; destroying guest", instance_uuid, host
            )
            _destroy_quietly(driver, instance_uuid)
            return BuildResult(instance_uuid, "skipped", host)
    LOG.info("Instance %s is ACTIVE on %s", instance_uuid, host)
    return BuildResult(instance_uuid, "active", host)


def _destroy_quietly(driver: ComputeDriver, instance_uuid: str) -> None:
    try:
        driver.destroy(instance_uuid)
    except Exception:  # noqa: BLE001 - cleanup of a failed build must not mask the failure
        LOG.exception("Instance %s: could not clean up the failed guest", instance_uuid)


def fail_build(
    db_url: str,
    instance_uuid: str,
    request_id: str,
    exc: BaseException,
    *,
    host: str | None,
    event: str = BUILD_EVENT,
    record_event: bool = True,
) -> bool:
    """The one undo of a build: release every allocation of the instance, put it in ERROR
    (task cleared, host and node nulled as Nova's abort does) with a fault. Idempotent:
    returns False, doing nothing, once the instance has left BUILDING."""

    def undo(session: Session) -> bool:
        try:
            instance = get_instance(session, instance_uuid)
        except InstanceNotFound:
            return False
        if instance.deleted or instance.vm_state != VmState.BUILDING:
            # Already compensated, or deleted: a deleted instance's claim is released by
            # the delete; release here too in case the delete raced the claim.
            if instance.deleted:
                release_in_session(session, instance_uuid)
            return False
        release_in_session(session, instance_uuid)
        instance.vm_state = VmState.ERROR
        instance.task_state = None
        instance.host = None
        instance.node = None
        instance.updated_at = utcnow()
        actions.add_fault(session, instance_uuid, exc, host)
        if record_event:
            actions.record_event(session, instance_uuid, request_id, event, host, exc)
        else:
            actions.finish_action(session, instance_uuid, request_id, actions.ERROR)
        return True

    if not retry_on_conflict(db_url, undo):
        return False
    LOG.info("Instance %s: build failed, now ERROR: %s", instance_uuid, exc)
    return True
