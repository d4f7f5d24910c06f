"""The one runner of host steps: a step is declared once (``Step``: the task_state it
expects, its driver call, its final values, its undo) and ``run_step`` does the rest.

A run is three short transactions around the driver call, so nothing holds a row lock
while the hypervisor works:

1. begin: under the instance's row lock, the instance must be on this host (not deleted)
   in one of the expected task_states, else the message is a redelivery or was
   superseded and the step returns ``skipped``; a compare-and-swap (with the step's begin
   values), the instance-action event (``compute_<method>``) opens;
2. ``act``, the driver call (it may move the task_state on with ``StepRun.advance``),
   then the guest's power state read back from the driver;
3. finish: the final values computed from the row locked again, a compare-and-swap from
   the step's task_states to them with task None; the event closes ``Success``.

A conflict at 2 or 3 (a delete or hard reboot took the instance over) is ``superseded``:
the instance's state is left to that request, our event closes with the conflict. A
failure of ``act`` ends as Nova ends it (NOVA_BEHAVIOUR.md §2.3): the step's
``on_failure`` policy gives the vm_state (``reverts_task_state``: unchanged;
``_error_out_instance_on_exception``: ERROR...), task None, a fault, the event closed
``Error`` (traceback kept), and the exception re-raised; a step with its own ``undo``
(build, unshelve, delete) does that instead. ``abort`` is the same undo for a step that
never ran (the errback after a delivery limit or a wrong host).

The versioned notifications (``instance.<event>.start|end|error``) are sent around the
run by ``notified_step`` (the task wrappers use it), as before the runner existed.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import bindparam, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from compute import busy_guests, delivery_ledger, notifications
from compute import instance_actions as actions
from compute.claims import retry_on_conflict
from compute.failure_policies import FailurePolicy, keep_vm_state
from compute.instance_row import InstanceRow, locked_row, set_row
from compute.instance_state import cas_update
from compute.power import DEFAULT_SHUTDOWN_TIMEOUT_S
from compute.sessions import Sessions
from models import Instance, outage
from novaq import fault_points
from novaq.exceptions import (
    DatabaseUnavailable,
    DomainNotFound,
    InstanceNotFound,
    UnexpectedTaskStateError,
)
from virt import power_state
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

DONE, SKIPPED, SUPERSEDED = "done", "skipped", "superseded"


@dataclass(frozen=True, slots=True)
class StepContext:
    """What a host step works with, built by its entry point (task wrapper, recovery,
    periodic task): the transactions, the hypervisor, this host, the request whose
    action records the step's event, and ``[DEFAULT] shutdown_timeout``."""

    sessions: Sessions
    driver: ComputeDriver
    host: str
    request_id: str = ""
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT_S


class Superseded(Exception):
    """Another request took the instance over mid-step (raised by ``StepRun.advance`` and
    the finish; ``run_step`` turns it into ``superseded``)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(slots=True)
class StepRun:
    """One run of a step: what begin found and opened, what ``act`` returned and the
    power state read after it, and the caller's keyword parameters."""

    ctx: StepContext
    instance_uuid: str
    event_id: int | None
    vm_state: str
    params: Mapping[str, Any] = field(default_factory=dict)
    result: Any = None
    power: int = power_state.NOSTATE
    #: What ``Step.prepare`` read in begin's transaction, or the error it raised there
    #: (raised again as ``act`` starts, so it is handled as the act's failure).
    prepared: Any = None
    prepare_error: BaseException | None = None
    #: How many times the finish was begun (a re-run after an outage checks whether an
    #: earlier one committed).
    finish_runs: int = 0
    #: The notifications read in begin's and finish's transactions (``run_step``'s).
    notices: notifications.StepNotices | None = None
    #: The task_state begin's compare-and-swap left on the row (None: it checked none).
    task_state: str | None = None

    def advance(
        self,
        expected: tuple[str, ...],
        values_of: Callable[[Instance], dict[str, Any]] | None = None,
        **values: Any,
    ) -> None:
        """A compare-and-swap mid-step (reboot's ``reboot_started``, shelve's
        ``shelving_offloading``), with ``values`` and those ``values_of`` the locked row."""
        try:
            with self.ctx.sessions() as session:
                instance = locked(session, self.instance_uuid)
                values.update(values_of(instance) if values_of is not None else {})
                cas_update(session, self.instance_uuid, expected_task_state=expected, **values)
        except (UnexpectedTaskStateError, InstanceNotFound) as exc:
            raise Superseded(exc) from exc


Act = Callable[[StepContext, StepRun], Any]
#: The final column values from the row locked in the finishing transaction, or None
#: when the step wrote the row itself (delete).
Final = Callable[[Session, Instance, StepRun], dict[str, Any] | None]
#: ``Final`` of a ``light_row`` step: from the row read as ``InstanceRow``.
RowFinal = Callable[[Session, InstanceRow, StepRun], dict[str, Any] | None]
#: The instance as begin and the finish lock it: ``InstanceRow`` for a ``light_row`` step.
LockedRow = Instance | InstanceRow
Undo = Callable[[StepContext, StepRun, BaseException], None]
#: What ``act`` needs from the database, read in begin's transaction (instance locked).
Prepare = Callable[[Session, Instance], Any]
#: ``Prepare`` of a ``light_row`` step: from the row read as ``InstanceRow``.
RowPrepare = Callable[[Session, InstanceRow], Any]
#: (sessions, step, instance_uuid, request_id, host, exc) -> whether it undid anything.
Abort = Callable[[Sessions, "Step", str, str, str, BaseException], bool]


def to(vm_state: str) -> Final:
    """The final values of a step that only sets ``vm_state``."""
    return lambda session, instance, run: {"vm_state": vm_state}


@dataclass(frozen=True, slots=True)
class Step:
    """A host step, declared once."""

    name: str
    #: The instance-action event (Nova's ``compute_<method>``).
    event: str
    #: The task_state the API (or the scheduler) set: what begin expects (None: the
    #: operation sets none, as Nova's trigger_crash_dump).
    task: str | None
    #: Every task_state the step owns: what the finish expects and an undo reverts from.
    tasks: tuple[str, ...]
    act: Act
    #: A ``RowFinal`` when ``light_row``.
    final: Final | RowFinal
    on_failure: FailurePolicy = keep_vm_state
    #: task_states begin accepts instead of ``(task,)``; ``any_task``: no check, no CAS.
    begin_tasks: tuple[str | None, ...] = ()
    any_task: bool = False
    begin_vm_states: tuple[str, ...] = ()
    #: Values of the begin compare-and-swap (computed before its transaction).
    begin_values: Callable[[StepContext, str], dict[str, Any]] | None = None
    finish_tasks: tuple[str, ...] = ()
    #: Nova's stop: the finish also accepts task None once the guest is off.
    none_if_off: bool = False
    read_power: bool = True
    quiet_power: bool = False
    check_host: bool = True
    #: A deleted instance makes the run ``skipped`` (a move step instead fails on it).
    skip_deleted: bool = True
    #: Whether the finish also closes the instance action (a move's steps leave it open).
    finish_action: bool = True
    #: The step's own failure handling (instead of ``on_failure`` + fault + event).
    undo: Undo | None = None
    #: Called after a superseded run (a guest spawned for a deleted server goes away).
    on_superseded: Callable[[StepContext, StepRun, BaseException], None] | None = None
    #: The errback's undo, when not ``revert_unran``.
    abort: Abort | None = None
    #: A step that sets no task_state: begin knows a redelivery by the request's action
    #: being finished (no state can tell), and the errback undoes only an open action.
    once_per_request: bool = False
    #: Reads for ``act`` done in begin's transaction (``StepRun.prepared``) rather than
    #: in one of their own (a ``RowPrepare`` when ``light_row``).
    prepare: Prepare | RowPrepare | None = None
    #: Begin and the finish read the instance as a Core row (``compute.instance_row``)
    #: rather than the ORM ``Instance`` (issue 16: half the load's CPU, twice a step);
    #: ``final`` and ``prepare`` then take that row.
    light_row: bool = False
    #: Begin's light row also says whether the instance holds PCI devices
    #: (``InstanceRow.holds_pci``: the build's guest names them).
    reads_pci: bool = False
    #: The finish's light row also says whether a node of this host counts failed
    #: builds (``InstanceRow.host_failed_builds``: the build's success resets them).
    reads_failed_builds: bool = False


def run_step(
    ctx: StepContext,
    step: Step,
    instance_uuid: str,
    *,
    notices: notifications.StepNotices | None = None,
    **params: Any,
) -> str:
    """Run ``step`` on ``instance_uuid``: ``done``, ``skipped`` or ``superseded``; a
    failure of its act is undone and re-raised.

    ``notices``: the step's ``.start`` is read in begin's transaction (the row as the
    message found it, before begin's change) and sent once begin has ended, skipped or
    not, before ``act``; its ``.end`` is read in the finish's transaction (the row as
    the finish left it) and sent once the finish has committed.

    A database outage is waited out phase by phase (``models.outage``, inside a worker's
    task), because only here is it known what has committed: a begin or a finish cut
    mid-way was rolled back and is made again (a finish whose commit happened but whose
    answer was lost finds its event closed ``Success``), so a guest that spawned is not
    spawned twice nor undone. Past the budget, a finish fails as an act does: the step's
    undo runs, with a budget of its own, once the database answers.
    """
    label = f"{step.name} of {instance_uuid}"
    fault_points.reach(f"{step.name}:begin")
    try:
        run = outage.ride_out(
            lambda: _begin(ctx, step, instance_uuid, params, notices), f"{label}: begin"
        )
    finally:
        # NOTE: sent even when begin failed after reading it, as it was sent before
        # begin when it had a transaction of its own.
        if notices is not None:
            notices.start.send()
    if run is None:
        return SKIPPED
    try:
        fault_points.reach(f"{step.name}:act")
        _act(ctx, step, run)
        fault_points.reach(f"{step.name}:finish")
        try:
            outcome = outage.ride_out(lambda: _finish(ctx, step, run), f"{label}: finish")
            if notices is not None:
                notices.end.send()
            return outcome
        except DatabaseUnavailable as exc:
            LOG.error(
                "Instance %s on %s: %s could not finish: %s",
                instance_uuid,
                ctx.host,
                step.name,
                exc,
            )
            _undo(ctx, step, run, exc)
            raise
    except Superseded as conflict:
        cause = conflict.cause
        return outage.ride_out(lambda: _superseded(ctx, step, run, cause), f"{label}: superseded")


#: Built once (issue 16: building it cost about as much as running it).
_LOCKED = (
    select(Instance)
    .where(Instance.uuid == bindparam("uuid"))
    .with_for_update()
    .execution_options(populate_existing=True)
)


def locked(session: Session, instance_uuid: str) -> Instance:
    """The instance row, locked until the transaction ends (SQLite: BEGIN IMMEDIATE)."""
    instance = session.scalars(_LOCKED, {"uuid": instance_uuid}).first()
    if instance is None:
        raise InstanceNotFound(uuid=instance_uuid)
    return instance


#: ``_LOCKED`` with the message of the instance's latest fault, for a notification's
#: payload read in the same statement.
_LOCKED_WITH_FAULT = (
    select(Instance, notifications.LATEST_FAULT)
    .where(Instance.uuid == bindparam("uuid"))
    .with_for_update(of=Instance)
    .execution_options(populate_existing=True)
)


def _locked_noting(
    session: Session,
    step: Step,
    instance_uuid: str,
    notices: notifications.StepNotices | None,
    with_pci: bool = False,
    failed_builds_of: str | None = None,
) -> tuple[LockedRow, str | None]:
    """``locked`` (``locked_row`` for a ``light_row`` step, with its ``holds_pci`` and
    ``host_failed_builds`` when asked for), and with ``notices`` the message of the
    latest fault (else None)."""
    if step.light_row:
        return locked_row(session, instance_uuid, notices is not None, with_pci, failed_builds_of)
    if notices is None:
        return locked(session, instance_uuid), None
    row = session.execute(_LOCKED_WITH_FAULT, {"uuid": instance_uuid}).first()
    if row is None:
        raise InstanceNotFound(uuid=instance_uuid)
    return row[0], row[1]


def _begin(
    ctx: StepContext,
    step: Step,
    instance_uuid: str,
    params: Mapping[str, Any],
    notices: notifications.StepNotices | None,
) -> StepRun | None:
    values = step.begin_values(ctx, instance_uuid) if step.begin_values else {}
    try:
        # The delivery's start rides this transaction, the step's first change
        # (``compute.delivery_ledger``): written once it committed, skipped or not.
        with delivery_ledger.start_riding() as ride, ctx.sessions() as session:
            instance, fault = _locked_noting(session, step, instance_uuid, notices, step.reads_pci)
            if notices is not None:
                notices.start.read(instance, fault)
            ride(session)
            if _skipped(session, ctx, step, instance, instance_uuid):
                return None
            vm_state = instance.vm_state
            if not step.any_task:
                cas_update(
                    session,
                    instance_uuid,
                    expected_task_state=step.begin_tasks or (step.task,),
                    **values,
                )
            event_id = actions.start_event(
                session, instance_uuid, ctx.request_id, step.event, ctx.host
            )
            run = StepRun(ctx, instance_uuid, event_id, vm_state, params, notices=notices)
            if not step.any_task:
                run.task_state = values.get("task_state", instance.task_state)
            if step.prepare is not None:
                _prepare(session, step.prepare, instance, run)
            return run
    except (InstanceNotFound, UnexpectedTaskStateError):
        return None


def _skipped(
    session: Session, ctx: StepContext, step: Step, instance: LockedRow, instance_uuid: str
) -> bool:
    """Whether begin finds the message a redelivery, or superseded (and says so)."""
    expected = step.begin_tasks or (step.task,)
    if not (
        (instance.deleted and step.skip_deleted)
        or (step.check_host and instance.host != ctx.host)
        or (not step.any_task and instance.task_state not in expected)
        or (step.begin_vm_states and instance.vm_state not in step.begin_vm_states)
        or (
            step.once_per_request
            and not actions.action_open(session, instance_uuid, ctx.request_id)
        )
    ):
        return False
    LOG.info(
        "Instance %s on %s: %s skipped, instance is %s/%s on %s",
        instance_uuid,
        ctx.host,
        step.name,
        instance.vm_state,
        instance.task_state,
        instance.host,
    )
    return True


def _prepare(
    session: Session, prepare: Prepare | RowPrepare, instance: LockedRow, run: StepRun
) -> None:
    """``run.prepared``, from the row as its kind (``light_row``) was read; an error of
    the step's own (not the database's, which ends the transaction) is kept for ``act``,
    as it would have been raised there."""
    try:
        if isinstance(instance, InstanceRow):
            run.prepared = cast(RowPrepare, prepare)(session, instance)
        else:
            run.prepared = cast(Prepare, prepare)(session, instance)
    except (SQLAlchemyError, DatabaseUnavailable):
        raise
    except Exception as exc:  # noqa: BLE001 - handled by act's failure path
        run.prepare_error = exc


def _act(ctx: StepContext, step: Step, run: StepRun) -> None:
    try:
        if run.prepare_error is not None:
            raise run.prepare_error
        # (``compute.busy_guests``: left before an undo or the finish can clear the task)
        with _busy(run):
            run.result = step.act(ctx, run)
            if step.read_power:
                run.power = guest_power_state(ctx.driver, run.instance_uuid, step.quiet_power)
    except Superseded:
        raise
    except Exception as exc:
        LOG.warning("Instance %s on %s: %s failed: %s", run.instance_uuid, ctx.host, step.name, exc)
        _undo(ctx, step, run, exc)
        raise


def _busy(run: StepRun) -> contextlib.AbstractContextManager[None]:
    if run.task_state is None:
        return contextlib.nullcontext()
    return busy_guests.acting(run.instance_uuid, run.task_state)


def _undo(ctx: StepContext, step: Step, run: StepRun, exc: BaseException) -> None:
    """The step's failure handling (its own undo, or its policy + fault + event), which
    must reach the database: waited out with a budget of its own (the step's may be
    spent). If the database stays away, the failure is still raised as it was (the
    errback undoes it); the outage is only logged."""

    def undo() -> None:
        if step.undo is not None:
            step.undo(ctx, run, exc)
        else:
            vm_state = step.on_failure(exc, run.vm_state)
            fail(ctx, step, run.instance_uuid, run.event_id, exc, vm_state)

    label = f"{step.name} of {run.instance_uuid}: undo"
    with outage.renewed():
        try:
            outage.ride_out(undo, label)
        except DatabaseUnavailable as lost:
            if lost is exc:
                raise
            LOG.error(
                "Instance %s on %s: %s not undone: %s", run.instance_uuid, ctx.host, step.name, lost
            )


def _finish(ctx: StepContext, step: Step, run: StepRun) -> str:
    expected: tuple[str | None, ...] = step.finish_tasks or step.tasks
    if step.none_if_off and run.power in power_state.NOT_RUNNING:
        expected = (*expected, None)
    uuid = run.instance_uuid
    run.finish_runs += 1
    rerun = run.finish_runs > 1

    def work(session: Session, ride: delivery_ledger.Ride) -> dict[str, Any] | None:
        builds_of = ctx.host if step.reads_failed_builds else None
        instance, fault = _locked_noting(session, step, uuid, run.notices, False, builds_of)
        if (
            rerun
            and run.event_id is not None
            and actions.event_result(session, run.event_id) == actions.SUCCESS
        ):
            # An earlier try of this finish committed; only its answer was lost.
            ride(session)
            _read_end(run, instance, fault, None)
            return {"vm_state": instance.vm_state, "task_state": instance.task_state}
        values = _final(step, session, instance, run)
        if values is not None:
            if step.read_power:
                values.setdefault("power_state", run.power)
            cas_update(
                session, uuid, expected_task_state=expected, **{**values, "task_state": None}
            )
        _read_end(run, instance, fault, values)
        if run.event_id is not None:
            actions.finish_event(
                session, run.event_id, actions.SUCCESS, finish_action=step.finish_action
            )
        # The delivery's end, when the step ends its workflow (``compute.delivery_ledger``).
        ride(session)
        return values

    try:
        with delivery_ledger.end_riding() as ride:
            values = retry_on_conflict(ctx.sessions, lambda session: work(session, ride))
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        raise Superseded(exc) from exc
    LOG.info("Instance %s on %s: %s done, now %s", uuid, ctx.host, step.name, values)
    return DONE


def _final(
    step: Step, session: Session, instance: LockedRow, run: StepRun
) -> dict[str, Any] | None:
    """The step's final values, from the row as its kind (``light_row``) was read."""
    if isinstance(instance, InstanceRow):
        return cast(RowFinal, step.final)(session, instance, run)
    return cast(Final, step.final)(session, instance, run)


def _read_end(
    run: StepRun, instance: LockedRow, fault: str | None, written: dict[str, Any] | None
) -> None:
    """The ``.end`` notice's payload, from the row the finish locked and what it wrote.

    NOTE: the finish's UPDATE left the loaded row as it was; what it wrote is set on it
    as committed state (nothing to flush), so the payload is the row a read would see.
    """
    if run.notices is None:
        return
    if written is not None:
        values = {**written, "task_state": None}
        if isinstance(instance, InstanceRow):
            set_row(instance, values)
        else:
            for key, value in values.items():
                set_committed_value(instance, key, value)
    run.notices.end.read(instance, fault)


def _superseded(ctx: StepContext, step: Step, run: StepRun, exc: BaseException) -> str:
    """Another request (a delete, a hard reboot) took the instance over mid-step: leave
    its state to that request, close our event with the conflict."""
    LOG.info("Instance %s on %s: %s superseded: %s", run.instance_uuid, ctx.host, step.name, exc)
    if step.on_superseded is not None:
        step.on_superseded(ctx, run, exc)
    else:
        close_event(ctx, run, exc)
    return SUPERSEDED


def close_event(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """Close the run's event (and its action) with ``exc`` as the outcome."""
    if run.event_id is not None:
        result, tb, details = actions.outcome(exc)
        with ctx.sessions() as session:
            actions.finish_event(session, run.event_id, result, tb, details, finish_action=True)


def fail(
    ctx: StepContext,
    step: Step,
    instance_uuid: str,
    event_id: int | None,
    exc: BaseException,
    vm_state: str | None,
) -> None:
    """Nova's ``reverts_task_state`` + ``wrap_instance_fault`` + the event's Error, in
    one transaction."""
    with ctx.sessions() as session:
        try:
            instance = locked(session, instance_uuid)
        except InstanceNotFound:
            return
        if not instance.deleted and instance.task_state in step.tasks:
            revert(session, instance_uuid, step, vm_state)
        actions.add_fault(session, instance_uuid, exc, ctx.host)
        if event_id is not None:
            result, tb, details = actions.outcome(exc)
            actions.finish_event(session, event_id, result, tb, details, finish_action=True)


def revert(session: Session, instance_uuid: str, step: Step, vm_state: str | None) -> None:
    values: dict[str, Any] = {"task_state": None}
    if vm_state is not None:
        values["vm_state"] = vm_state
    cas_update(session, instance_uuid, expected_task_state=step.tasks, **values)


def abort(
    sessions: Sessions,
    step: Step,
    instance_uuid: str,
    request_id: str,
    host: str,
    exc: BaseException,
) -> bool:
    """Undo a run of ``step`` that failed outside its own handling (delivery limit, wrong
    host): the step's ``abort`` if it has one, else as its own failure path but only
    while the instance is still in one of its task_states. Idempotent: False when there
    was nothing left to undo. (No driver: the errback may run where there is none.)"""
    if step.abort is not None:
        return step.abort(sessions, step, instance_uuid, request_id, host, exc)
    with sessions() as session:
        try:
            instance = locked(session, instance_uuid)
        except InstanceNotFound:
            return False
        if instance.deleted or not _in_flight(session, step, instance, request_id):
            return False
        if step.tasks:
            revert(session, instance_uuid, step, step.on_failure(exc, instance.vm_state))
        actions.add_fault(session, instance_uuid, exc, host)
        actions.record_event(session, instance_uuid, request_id, step.event, host, exc)
    LOG.warning("Instance %s on %s: %s aborted: %s", instance_uuid, host, step.name, exc)
    return True


@contextlib.contextmanager
def notified_step(ctx: StepContext, action: str, instance_uuid: str) -> Iterator[None]:
    """``instance.<action>.start|end|error`` around a step (``compute.notifications``)."""
    with notifications.notified(ctx.sessions, action, instance_uuid, ctx.host, ctx.request_id):
        yield


def guest_power_state(driver: ComputeDriver, instance_uuid: str, quiet: bool = False) -> int:
    """Nova's ``_get_power_state``: the driver's view, NOSTATE for a missing guest (and,
    when ``quiet``, for a hypervisor that cannot answer)."""
    try:
        return driver.get_info(instance_uuid).power_state
    except DomainNotFound:
        return power_state.NOSTATE
    except Exception:
        if not quiet:
            raise
        LOG.warning("Instance %s: power state unknown", instance_uuid, exc_info=True)
        return power_state.NOSTATE


def _in_flight(session: Session, step: Step, instance: Instance, request_id: str) -> bool:
    """Whether ``step`` of ``request_id`` is still in flight on the instance: in one of its
    task_states, or for a step that sets none, with the request's action still open."""
    if step.once_per_request:
        return actions.action_open(session, instance.uuid, request_id)
    return instance.task_state in step.tasks
