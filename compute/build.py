"""Build on a compute host (Nova's ``build_and_run_instance``) and the undo of a build
that failed anywhere on its way (scheduler, compute, or a lost message).

The host was chosen and claimed by the scheduler; this module only spawns, records and,
on failure, compensates: destroy what was started, release the claim, ERROR + fault.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.claims import (
    ResourceRequest,
    claim_in_session,
    release_in_session,
    retry_on_conflict,
)
from compute.heal import release_orphan
from compute.images import image_spec
from compute.instance_state import cas_update, get_instance
from compute.pci import PciRequest, held_devices
from compute.states import TaskState, VmState
from models import ComputeNode, Instance, utcnow
from models.alternate import Alternate
from models.db import session_scope
from novaq.exceptions import (
    ImageNotFound,
    ImageUnacceptable,
    InstanceNotFound,
    ResourcesUnavailable,
    UnexpectedTaskStateError,
)
from virt.driver import ComputeDriver, GuestSpec

LOG = logging.getLogger(__name__)

BUILD_EVENT = "compute__do_build_and_run_instance"
SCHEDULE_EVENT = "conductor_schedule_and_build_instances"


def instance_name(instance: Instance) -> str:
    """Nova's default ``instance_name_template``: ``instance-%08x``."""
    return f"instance-{instance.id:08x}"


def guest_spec(
    session: Session,
    instance: Instance,
    pci_addresses: tuple[str, ...] = (),
    flavor: dict[str, Any] | None = None,
) -> GuestSpec:
    """The guest of ``instance`` with ``flavor`` (default: the instance's own), booting
    from the registry's record of its image (``ImageNotFound`` if it was purged)."""
    flavor = flavor if flavor is not None else instance.flavor
    return GuestSpec(
        uuid=instance.uuid,
        name=instance_name(instance),
        vcpus=flavor["vcpus"],
        memory_mb=flavor["memory_mb"],
        root_gb=flavor["root_gb"],
        ephemeral_gb=flavor.get("ephemeral_gb", 0),
        swap_mb=flavor.get("swap", 0),
        image=image_spec(session, instance.image_ref) if instance.image_ref else None,
        pci_addresses=pci_addresses,
        # The domain's <metadata> names the server and its flavor, as Nova's does.
        display_name=instance.display_name or "",
        flavor_name=str(flavor.get("name", "")),
    )


@dataclass(frozen=True, slots=True)
class BuildResult:
    instance_uuid: str
    outcome: str  # "active", "rescheduled", "skipped" (a final failure raises)
    host: str | None
    next_host: Alternate | None = None
    alternates: tuple[Alternate, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "instance_uuid": self.instance_uuid,
            "outcome": self.outcome,
            "host": self.host,
            "next_host": list(self.next_host) if self.next_host else None,
        }


@dataclass(frozen=True, slots=True)
class BuildAttempt:
    """Where this build may go next if it fails here (Nova's ``host_list``)."""

    number: int = 1
    max_attempts: int = 1
    alternates: tuple[Alternate, ...] = ()


def build_and_run_instance(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    request_id: str,
    host: str,
    attempt: BuildAttempt = BuildAttempt(),
    track_failures: bool = True,
) -> BuildResult:
    """Spawn the claimed instance on this host. A spawn failure is rescheduled to the next
    alternate (claim moved with it) while attempts remain, else the build is errored out.
    Idempotent under redelivery: a second delivery finds the state moved on (``skipped``)."""
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
            spec = guest_spec(session, instance, tuple(d.address for d in devices))
            event_id = actions.start_event(session, instance_uuid, request_id, BUILD_EVENT, host)
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        LOG.info("Instance %s on %s: build skipped: %s", instance_uuid, host, exc)
        return BuildResult(instance_uuid, "skipped", host)
    except ImageNotFound as exc:
        # Nova aborts the build (no reschedule: no other host can fetch a purged image).
        fail_build(db_url, instance_uuid, request_id, exc, host=host)
        raise
    try:
        info = driver.spawn(spec)
    except Exception as exc:
        LOG.warning("Instance %s on %s: spawn failed: %s", instance_uuid, host, exc)
        _finish_event(db_url, event_id, exc)
        destroy_quietly(driver, instance_uuid)
        if isinstance(exc, ImageUnacceptable):
            # Nova aborts (BuildAbortException): every other host would meet the same
            # image, and the failure says nothing about this host's health.
            fail_build(db_url, instance_uuid, request_id, exc, host=host, record_event=False)
            raise
        if track_failures:
            record_build_result(db_url, host, succeeded=False)
        return _reschedule_or_fail(db_url, instance_uuid, request_id, host, attempt, exc)
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
            if event_id is not None:
                actions.finish_event(session, event_id, actions.SUCCESS, finish_action=True)
    except (UnexpectedTaskStateError, InstanceNotFound):
        # Deleted while spawning: the delete has released the claim; take the guest
        # back down so nothing runs for a server that no longer exists.
        LOG.info("Instance %s deleted while spawning on %s; destroying guest", instance_uuid, host)
        destroy_deleted_guest(db_url, driver, host, instance_uuid)
        _finish_event(db_url, event_id, None)
        return BuildResult(instance_uuid, "skipped", host)
    if track_failures:
        record_build_result(db_url, host, succeeded=True)
    LOG.info("Instance %s is ACTIVE on %s", instance_uuid, host)
    return BuildResult(instance_uuid, "active", host)


def _finish_event(db_url: str, event_id: int | None, exc: BaseException | None) -> None:
    if event_id is None:
        return
    result, tb, details = actions.outcome(exc)
    with session_scope(db_url) as session:
        actions.finish_event(session, event_id, result, tb, details)


def _reschedule_or_fail(
    db_url: str,
    instance_uuid: str,
    request_id: str,
    host: str,
    attempt: BuildAttempt,
    exc: Exception,
) -> BuildResult:
    if attempt.number < attempt.max_attempts and attempt.alternates:
        moved = reschedule(db_url, instance_uuid, host, attempt.alternates, exc)
        if moved is not None:
            next_host, remaining = moved
            LOG.info("Instance %s rescheduled from %s to %s", instance_uuid, host, next_host[0])
            return BuildResult(instance_uuid, "rescheduled", host, next_host, remaining)
    fail_build(db_url, instance_uuid, request_id, exc, host=host, record_event=False)
    raise exc


def reschedule(
    db_url: str,
    instance_uuid: str,
    failed_host: str,
    alternates: tuple[Alternate, ...],
    exc: BaseException,
) -> tuple[Alternate, tuple[Alternate, ...]] | None:
    """Move the claim to the first alternate that can still take it (release here, claim
    there, host/node switched, task back to ``scheduling``, in one transaction), with a
    fault for the failed attempt. None when no alternate can take it."""
    for index, alternate in enumerate(alternates):
        _, _, node_id = alternate

        def move(session: Session, alt: Alternate = alternate, nid: int = node_id) -> None:
            instance = get_instance(session, instance_uuid)
            wanted = ResourceRequest.from_flavor(
                instance.flavor,
                [
                    PciRequest.from_dict(p)
                    for p in (instance.request_spec or {}).get("pci_requests", ())
                ],
            )
            release_in_session(session, instance_uuid)
            claim_in_session(session, nid, instance_uuid, wanted)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.SPAWNING],
                task_state=TaskState.SCHEDULING,
                host=alt[0],
                node=alt[1],
            )
            actions.add_fault(session, instance_uuid, exc, failed_host)

        try:
            retry_on_conflict(db_url, move)
        except ResourcesUnavailable as claim_error:
            LOG.info(
                "Instance %s: alternate %s cannot take it: %s",
                instance_uuid,
                alternate[0],
                claim_error,
            )
            continue
        except (UnexpectedTaskStateError, InstanceNotFound):
            return None
        return alternate, alternates[index + 1 :]
    return None


def record_build_result(db_url: str, host: str, succeeded: bool) -> None:
    """Nova's ``build_failed``/``build_succeeded``: a count of consecutive failed builds in
    the node's stats, read by the BuildFailureWeigher."""
    with session_scope(db_url) as session:
        for node in session.scalars(
            select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
        ):
            stats = dict(node.stats or {})
            failed = 0 if succeeded else int(stats.get("failed_builds", 0)) + 1
            if stats.get("failed_builds", 0) != failed:
                stats["failed_builds"] = failed
                node.stats = stats


def destroy_quietly(driver: ComputeDriver, instance_uuid: str) -> None:
    """Destroy a guest as cleanup: a failure is logged, never raised, so it cannot mask
    the error being handled (and the audit still sees a guest that stayed)."""
    try:
        driver.destroy(instance_uuid)
    except Exception:  # noqa: BLE001 - see above
        LOG.exception("Instance %s: could not clean up the guest", instance_uuid)


def destroy_deleted_guest(
    db_url: str, driver: ComputeDriver, host: str, instance_uuid: str
) -> None:
    """Destroy the guest of a server deleted meanwhile, and give back what a heal counted
    for it as an orphan while it ran (``compute.heal.release_destroyed_orphan``): the
    delete released the server's own claim, but not a count made after it."""
    destroy_quietly(driver, instance_uuid)
    release_orphan(db_url, host, instance_uuid)


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
            instance = get_instance(session, instance_uuid, lock=True)
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
