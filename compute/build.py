"""Build on a compute host (Nova's ``build_and_run_instance``) and the undo of a build
that failed anywhere on its way (scheduler, compute, or a lost message).

The host was chosen and claimed by the scheduler; this module only spawns, records and,
on failure, compensates: destroy what was started, release the claim, ERROR + fault.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy import String, bindparam, select, update
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute import notifications
from compute.claims import (
    ResourceRequest,
    claim,
    claim_first,
    release,
    retry_on_conflict,
)
from compute.guest import guest_spec, instance_name
from compute.heal import release_orphan
from compute.instance_row import InstanceRow
from compute.instance_state import cas_update, get_instance
from compute.pci import PciRequest, held_by
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from compute.steps import DONE, Step, StepContext, StepRun, run_step
from models import ComputeNode, PciDevice, utcnow
from models.alternate import Alternate
from models.tables import table_of
from novaq.exceptions import (
    DatabaseUnavailable,
    ImageNotFound,
    ImageUnacceptable,
    InstanceNotFound,
    UnexpectedTaskStateError,
)
from virt.driver import ComputeDriver, GuestSpec

__all__ = ["guest_spec", "instance_name"]

LOG = logging.getLogger(__name__)

BUILD_EVENT = "compute__do_build_and_run_instance"
#: A build's outcome once its step is done (what the build task returns).
DONE_OUTCOME = "active"
SCHEDULE_EVENT = "conductor_schedule_and_build_instances"
#: The action of a build's versioned notifications (``instance.create.*``).
CREATE = "create"


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


class Rescheduled(Exception):
    """The failed build's claim moved to an alternate (raised out of the step's undo)."""

    def __init__(self, next_host: Alternate, remaining: tuple[Alternate, ...]) -> None:
        super().__init__(next_host[0])
        self.next_host, self.remaining = next_host, remaining


#: The addresses of the PCI devices an instance holds (``held_devices``' rows, in its
#: order): a Core statement built once (issue 16: the ORM load was built at every build).
_HELD_ADDRESSES = (
    select(PciDevice.address)
    .where(*held_by(bindparam("uuid", type_=String)))
    .order_by(PciDevice.address)
)


def _guest(session: Session, instance: InstanceRow) -> GuestSpec:
    """The guest to spawn, read in begin's transaction (``Step.prepare``) from its light
    row: the addresses of its PCI devices only when the row says it holds some."""
    if instance.holds_pci is False:
        return guest_spec(session, instance, ())
    # NOTE: on the connection: no ORM result to build for a column of strings, and
    # nothing pending in this transaction touches ``pci_devices`` (no flush needed).
    addresses = session.connection().scalars(_HELD_ADDRESSES, {"uuid": instance.uuid}).all()
    return guest_spec(session, instance, tuple(addresses))


def _spawn(ctx: StepContext, run: StepRun) -> int:
    spec: GuestSpec = run.prepared
    return ctx.driver.spawn(spec).power_state


def _active(session: Session, instance: InstanceRow, run: StepRun) -> dict[str, Any]:
    if run.params.get("track_failures", True) and instance.host_failed_builds is not False:
        # In the finish's transaction: the build's success and the host's record of it
        # (nothing to write, nor to read, when the row says no node counts a failure).
        note_build_result(session, run.ctx.host, succeeded=True)
    return {"vm_state": VmState.ACTIVE, "power_state": run.result, "launched_at": utcnow()}


def _spawn_failed(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """Nova's ``_do_build_and_run_instance`` failure: the guest destroyed, then an abort
    (a purged or unacceptable image: no other host would do better) or a reschedule to
    the next alternate while attempts remain, else the build errored out."""
    uuid, request_id = run.instance_uuid, ctx.request_id
    if not isinstance(exc, ImageNotFound):
        # NOTE: before any database write, so that the guest goes even when the database
        # does not answer (the errback, which has no hypervisor, finishes the undo).
        destroy_quietly(ctx.driver, uuid)
    _finish_event(ctx.sessions, run.event_id, exc)
    if isinstance(exc, ImageNotFound | ImageUnacceptable):
        # Nova aborts (BuildAbortException): every other host would meet the same
        # image, and the failure says nothing about this host's health.
        fail_build(ctx.sessions, uuid, request_id, exc, host=ctx.host, record_event=False)
        return
    # The database's outage says nothing of this host's health: not a failed build here.
    if run.params.get("track_failures", True) and not isinstance(exc, DatabaseUnavailable):
        record_build_result(ctx.sessions, ctx.host, succeeded=False)
    attempt: BuildAttempt = run.params.get("attempt") or BuildAttempt()
    if attempt.number < attempt.max_attempts and attempt.alternates:
        moved = reschedule(ctx.sessions, uuid, ctx.host, attempt.alternates, exc)
        if moved is not None:
            LOG.info("Instance %s rescheduled from %s to %s", uuid, ctx.host, moved[0][0])
            raise Rescheduled(*moved) from exc
    fail_build(ctx.sessions, uuid, request_id, exc, host=ctx.host, record_event=False)


def _deleted_while_spawning(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    # The delete has released the claim; take the guest back down so nothing runs for a
    # server that no longer exists.
    LOG.info(
        "Instance %s deleted while spawning on %s; destroying guest", run.instance_uuid, ctx.host
    )
    destroy_deleted_guest(ctx, run.instance_uuid)
    _finish_event(ctx.sessions, run.event_id, None)


#: Begins from ``scheduling`` (or None) while BUILDING, wherever the instance is recorded
#: (the claim has set this host).
BUILD = Step(
    "build",
    BUILD_EVENT,
    TaskState.SCHEDULING,
    (TaskState.SCHEDULING, TaskState.SPAWNING),
    _spawn,
    _active,
    begin_tasks=(TaskState.SCHEDULING, None),
    begin_vm_states=(VmState.BUILDING,),
    begin_values=lambda ctx, uuid: {"task_state": TaskState.SPAWNING},
    prepare=_guest,
    finish_tasks=(TaskState.SPAWNING,),
    read_power=False,
    check_host=False,
    undo=_spawn_failed,
    on_superseded=_deleted_while_spawning,
    light_row=True,
    reads_pci=True,
    reads_failed_builds=True,
)


def build_and_run_instance(
    ctx: StepContext,
    instance_uuid: str,
    attempt: BuildAttempt = BuildAttempt(),
    track_failures: bool = True,
    notify: bool = False,
) -> BuildResult:
    """Spawn the claimed instance on this host. A spawn failure is rescheduled to the next
    alternate (claim moved with it) while attempts remain, else the build is errored out.
    Idempotent under redelivery: a second delivery finds the state moved on (``skipped``).

    ``notify``: Nova's ``instance.create.start`` (every delivery), ``.end`` (once
    ACTIVE) and ``.error`` (a failure, or a reschedule), the first two read in the
    step's own transactions (``run_step``'s ``notices``)."""
    host = ctx.host
    notices = (
        notifications.step_notices(CREATE, instance_uuid, host, ctx.request_id) if notify else None
    )
    try:
        outcome = run_step(
            ctx,
            BUILD,
            instance_uuid,
            notices=notices,
            attempt=attempt,
            track_failures=track_failures,
        )
    except Rescheduled as moved:
        # Nova: a reschedule is a create.error.
        _create_error(ctx, instance_uuid, notify)
        return BuildResult(instance_uuid, "rescheduled", host, moved.next_host, moved.remaining)
    except Exception:
        _create_error(ctx, instance_uuid, notify)
        raise
    if outcome != DONE:
        return BuildResult(instance_uuid, "skipped", host)
    # (logged by the runner: "build done, now {'vm_state': 'active', ...}")
    return BuildResult(instance_uuid, DONE_OUTCOME, host)


def _create_error(ctx: StepContext, instance_uuid: str, notify: bool) -> None:
    if notify:
        notifications.emit(
            ctx.sessions,
            f"instance.{CREATE}.error",
            instance_uuid,
            ctx.host,
            ctx.request_id,
            "ERROR",
        )


def _finish_event(sessions: Sessions, event_id: int | None, exc: BaseException | None) -> None:
    if event_id is None:
        return
    result, tb, details = actions.outcome(exc)
    with sessions() as session:
        actions.finish_event(session, event_id, result, tb, details)


def reschedule(
    sessions: Sessions,
    instance_uuid: str,
    failed_host: str,
    alternates: tuple[Alternate, ...],
    exc: BaseException,
) -> tuple[Alternate, tuple[Alternate, ...]] | None:
    """Move the claim to the first alternate that can still take it (release here, claim
    there, host/node switched, task back to ``scheduling``, in one transaction), with a
    fault for the failed attempt. None when no alternate can take it."""

    def move(session: Session, alt: Alternate) -> None:
        instance = get_instance(session, instance_uuid)
        wanted = ResourceRequest.from_flavor(
            instance.flavor,
            [
                PciRequest.from_dict(p)
                for p in (instance.request_spec or {}).get("pci_requests", ())
            ],
        )
        release(session, instance_uuid)
        claim(session, alt[2], instance_uuid, wanted)
        cas_update(
            session,
            instance_uuid,
            expected_task_state=[TaskState.SPAWNING],
            task_state=TaskState.SCHEDULING,
            host=alt[0],
            node=alt[1],
        )
        actions.add_fault(session, instance_uuid, exc, failed_host)

    def refused(alt: Alternate, claim_error: BaseException) -> None:
        LOG.info("Instance %s: alternate %s cannot take it: %s", instance_uuid, alt[0], claim_error)

    try:
        fit = claim_first(sessions, alternates, move, lambda alt: alt[0], refused)
    except (UnexpectedTaskStateError, InstanceNotFound):
        return None
    if fit.chosen is None:
        return None
    return fit.chosen, alternates[fit.index + 1 :]


def record_build_result(sessions: Sessions, host: str, succeeded: bool) -> None:
    """``note_build_result`` in a transaction of its own (a failed build's)."""
    with sessions() as session:
        note_build_result(session, host, succeeded)


#: The nodes' stats of a host, and one node's new stats: Core statements built once (a
#: build's finish ran an ORM load of every node of its host).
_HOST_STATS = select(ComputeNode.id, ComputeNode.stats).where(
    ComputeNode.host == bindparam("host"), ComputeNode.deleted == 0
)
_NODES = table_of(ComputeNode)
_SET_STATS = (
    update(_NODES)
    .where(_NODES.c.id == bindparam("node_id"))
    .values(stats=bindparam("new_stats", type_=_NODES.c.stats.type))
)


def note_build_result(session: Session, host: str, succeeded: bool) -> None:
    """Nova's ``build_failed``/``build_succeeded``: a count of consecutive failed builds in
    the node's stats, read by the BuildFailureWeigher. (Nothing written when the count
    stays: a success on a host with none.)"""
    # NOTE: on the connection, as ``_guest``'s read: nothing pending touches the nodes.
    for node_id, current in session.connection().execute(_HOST_STATS, {"host": host}).all():
        stats = dict(current or {})
        failed = 0 if succeeded else int(stats.get("failed_builds", 0)) + 1
        if stats.get("failed_builds", 0) != failed:
            stats["failed_builds"] = failed
            session.execute(_SET_STATS, {"node_id": node_id, "new_stats": stats})


def destroy_quietly(driver: ComputeDriver, instance_uuid: str) -> None:
    """Destroy a guest as cleanup: a failure is logged, never raised, so it cannot mask
    the error being handled (and the audit still sees a guest that stayed)."""
    try:
        driver.destroy(instance_uuid)
    except Exception:  # noqa: BLE001 - see above
        LOG.exception("Instance %s: could not clean up the guest", instance_uuid)


def destroy_deleted_guest(ctx: StepContext, instance_uuid: str) -> None:
    """Destroy the guest of a server deleted meanwhile, and give back what a heal counted
    for it as an orphan while it ran (``compute.heal.release_destroyed_orphan``): the
    delete released the server's own claim, but not a count made after it."""
    destroy_quietly(ctx.driver, instance_uuid)
    release_orphan(ctx.sessions, ctx.host, instance_uuid)


def fail_build(
    sessions: Sessions,
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
                release(session, instance_uuid)
            return False
        release(session, instance_uuid)
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

    if not retry_on_conflict(sessions, undo):
        return False
    LOG.info("Instance %s: build failed, now ERROR: %s", instance_uuid, exc)
    return True
