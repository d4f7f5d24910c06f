"""Power and lifecycle operations on a compute host: Nova's ``stop_instance``,
``start_instance``, ``reboot_instance``, ``pause/unpause_instance``,
``suspend/resume_instance`` and ``rescue/unrescue_instance``.

The API has already set the operation's task_state (``powering-off``, ``pausing``, …).
Each operation here is one step on the instance's host:

1. begin: under a row lock, the instance must be on this host in that task_state, else
   the message is a redelivery or was superseded and the step returns ``skipped``; the
   instance-action event (``compute_<method>``) opens;
2. the driver call, then the guest's power state read back from the driver;
3. finish: a compare-and-swap from the operation's task_state to its final vm_state,
   task None and the driver's power state; the event closes ``Success``.

A driver failure ends as Nova ends it (NOVA_BEHAVIOUR.md §2.3): ``reverts_task_state``
(task None, vm unchanged) for stop, start, pause and unpause; ``_error_out_instance_on_
exception`` (ERROR, or the previous vm_state for ``NotImplementedError``) for suspend,
resume and unrescue; ERROR for rescue and for a reboot that leaves the guest not
running. Always with a fault and the event closed ``Error`` (traceback kept), and the
exception re-raised. ``abort`` is the same undo for a step that never ran (errback).

Rescue is Nova's libvirt rescue (``ComputeDriver.rescue``): the guest's domain saved,
a rescue domain booted from the rescue image (the instance's own image) with the
original root disk attached second: RESCUED with power RUNNING. Unrescue restores the
saved domain and starts it (ACTIVE). Not done: a rescue password (no metadata service).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.images import image_spec
from compute.instance_state import cas_update
from compute.power import (
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    current_guest_spec,
    instance_power_off_timeout,
)
from compute.states import TaskState, VmState
from models import Instance, utcnow
from models.db import session_scope
from novaq.exceptions import (
    DomainNotFound,
    InstanceNotFound,
    NovaqError,
    UnexpectedTaskStateError,
)
from virt import power_state
from virt.driver import ComputeDriver, ImageSpec

LOG = logging.getLogger(__name__)

DONE, SKIPPED, SUPERSEDED = "done", "skipped", "superseded"
SHELVED_KEYS = ("shelved_at", "shelved_image_id", "shelved_host")


class InstanceNotRescuable(NovaqError):
    msg_fmt = "Instance %(uuid)s cannot be rescued: %(reason)s"
    code = 400


#: What a failure does to vm_state: given the error and the vm_state at the start, the
#: vm_state to set, or None to leave it.
FailurePolicy = Callable[[BaseException, str], str | None]
#: The final column values, computed from the row locked in the finishing transaction.
FinalValues = Callable[[Instance], dict[str, Any]]


def _keep_vm_state(exc: BaseException, vm_state: str) -> str | None:
    return None


def _error(exc: BaseException, vm_state: str) -> str | None:
    return VmState.ERROR


def _error_unless_not_implemented(fallback: str | None) -> FailurePolicy:
    def decide(exc: BaseException, vm_state: str) -> str | None:
        if isinstance(exc, NotImplementedError):
            return fallback or vm_state
        return VmState.ERROR

    return decide


@dataclass(frozen=True, slots=True)
class Operation:
    name: str
    event: str
    #: The task_state the API set, and every task_state this operation owns.
    task: str
    tasks: tuple[str, ...]
    on_failure: FailurePolicy


def _op(name: str, task: str, policy: FailurePolicy, *more: str) -> Operation:
    return Operation(name, f"compute_{name}_instance", task, (task, *more), policy)


STOP = _op("stop", TaskState.POWERING_OFF, _keep_vm_state)
START = _op("start", TaskState.POWERING_ON, _keep_vm_state)
REBOOT = _op(
    "reboot", TaskState.REBOOTING, _error, TaskState.REBOOT_PENDING, TaskState.REBOOT_STARTED
)
REBOOT_HARD = _op(
    "reboot",
    TaskState.REBOOTING_HARD,
    _error,
    TaskState.REBOOT_PENDING_HARD,
    TaskState.REBOOT_STARTED_HARD,
)
PAUSE = _op("pause", TaskState.PAUSING, _keep_vm_state)
UNPAUSE = _op("unpause", TaskState.UNPAUSING, _keep_vm_state)
SUSPEND = _op("suspend", TaskState.SUSPENDING, _error_unless_not_implemented(None))
RESUME = _op("resume", TaskState.RESUMING, _error_unless_not_implemented(None))
RESCUE = _op("rescue", TaskState.RESCUING, _error)
UNRESCUE = _op("unrescue", TaskState.UNRESCUING, _error_unless_not_implemented(VmState.ACTIVE))

#: By task name suffix (``compute.<key>_instance``), for the errback.
OPERATIONS: dict[str, Operation] = {
    op.name: op for op in (STOP, START, PAUSE, UNPAUSE, SUSPEND, RESUME, RESCUE, UNRESCUE)
}
OPERATIONS["reboot"] = REBOOT
OPERATIONS["reboot_hard"] = REBOOT_HARD


# -- the operations ---------------------------------------------------------------------


def stop_instance(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    request_id: str,
    host: str,
    clean_shutdown: bool = True,
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT_S,
) -> str:
    """Power off: ``powering-off`` → STOPPED. A clean shutdown (``compute.power``) waited
    for up to ``shutdown_timeout_s`` (``[DEFAULT] shutdown_timeout``) unless the image says
    otherwise, then destroy; ``clean_shutdown`` False (``force_stop``) destroys at once.
    As Nova, the final compare-and-swap also accepts task None when the guest is off
    (another operation may have cleared it)."""

    def act() -> None:
        timeout = instance_power_off_timeout(
            db_url, instance_uuid, shutdown_timeout_s, clean_shutdown
        )
        driver.power_off(instance_uuid, timeout)

    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        STOP,
        act,
        lambda instance: {"vm_state": VmState.STOPPED},
        none_if_off=True,
    )


def start_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    """Power on: ``powering-on`` → ACTIVE, dropping shelve keys from system_metadata."""

    def final(instance: Instance) -> dict[str, Any]:
        values: dict[str, Any] = {"vm_state": VmState.ACTIVE}
        meta = dict(instance.system_metadata or {})
        if any(key in meta for key in SHELVED_KEYS):
            values["system_metadata"] = {k: v for k, v in meta.items() if k not in SHELVED_KEYS}
        return values

    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        START,
        lambda: driver.power_on(instance_uuid),
        final,
    )


def pause_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        PAUSE,
        lambda: driver.pause(instance_uuid),
        lambda instance: {"vm_state": VmState.PAUSED},
    )


def unpause_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        UNPAUSE,
        lambda: driver.unpause(instance_uuid),
        lambda instance: {"vm_state": VmState.ACTIVE},
    )


def suspend_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    """Managed save: ``suspending`` → SUSPENDED, the previous vm_state stashed in
    system_metadata ``old_vm_state`` for resume."""

    def final(instance: Instance) -> dict[str, Any]:
        meta = {**(instance.system_metadata or {}), "old_vm_state": instance.vm_state}
        return {"vm_state": VmState.SUSPENDED, "system_metadata": meta}

    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        SUSPEND,
        lambda: driver.suspend(instance_uuid),
        final,
    )


def resume_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    """``resuming`` → the stashed ``old_vm_state`` (ACTIVE when none), popped."""

    def final(instance: Instance) -> dict[str, Any]:
        meta = dict(instance.system_metadata or {})
        vm_state = meta.pop("old_vm_state", None) or VmState.ACTIVE
        return {"vm_state": vm_state, "system_metadata": meta}

    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        RESUME,
        lambda: driver.resume(instance_uuid),
        final,
    )


def rescue_instance(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    request_id: str,
    host: str,
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT_S,
    rescue_image_ref: str | None = None,
) -> str:
    """``rescuing`` → RESCUED: the guest boots the rescue image (``rescue_image_ref``,
    else the instance's own, as Nova's ``_get_rescue_image``); ``launched_at`` reset as
    Nova does. A driver error is ``InstanceNotRescuable`` and ERRORs the instance."""

    def act() -> None:
        try:
            # Nova's rescue: a clean power-off of the guest first, then the rescue domain.
            timeout = instance_power_off_timeout(db_url, instance_uuid, shutdown_timeout_s)
            driver.power_off(instance_uuid, timeout)
            spec = current_guest_spec(db_url, instance_uuid)
            driver.rescue(spec, _rescue_image(db_url, rescue_image_ref) or spec.image)
        except Exception as exc:
            raise InstanceNotRescuable(uuid=instance_uuid, reason=f"Driver Error: {exc}") from exc

    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        RESCUE,
        act,
        lambda instance: {"vm_state": VmState.RESCUED, "launched_at": utcnow()},
    )


def _rescue_image(db_url: str, rescue_image_ref: str | None) -> ImageSpec | None:
    if rescue_image_ref is None:
        return None
    with session_scope(db_url) as session:
        return image_spec(session, rescue_image_ref)


def unrescue_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    """``unrescuing`` → ACTIVE: the guest's own domain back, started."""
    return _run(
        db_url,
        driver,
        instance_uuid,
        request_id,
        host,
        UNRESCUE,
        lambda: driver.unrescue(instance_uuid),
        lambda instance: {"vm_state": VmState.ACTIVE},
    )


def reboot_instance(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    request_id: str,
    host: str,
    hard: bool = False,
) -> str:
    """``rebooting`` → ``reboot_pending`` → ``reboot_started`` → ACTIVE (RESCUED stays
    RESCUED); the ``_hard`` states for a hard reboot. A failed reboot that leaves the
    guest running keeps the instance as it was, with a fault (Nova records the event as
    Success then); otherwise the instance goes to ERROR. The driver gets the instance's
    guest as it is now (``compute.power.current_guest_spec``): a hard reboot defines it
    again from fresh XML, as Nova's does."""
    op = REBOOT_HARD if hard else REBOOT
    _, pending, started = op.tasks
    begun = _begin(
        db_url,
        instance_uuid,
        request_id,
        host,
        op,
        op.tasks,
        task_state=pending,
        power_state=guest_power_state(driver, instance_uuid, quiet=True),
    )
    if begun is None:
        return SKIPPED
    try:
        with session_scope(db_url) as session:
            cas_update(session, instance_uuid, expected_task_state=[pending], task_state=started)
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        return _superseded(db_url, instance_uuid, host, op, begun.event_id, exc)
    new_vm_state = VmState.RESCUED if begun.vm_state == VmState.RESCUED else VmState.ACTIVE
    try:
        driver.reboot(current_guest_spec(db_url, instance_uuid), hard)
    except Exception as exc:
        if guest_power_state(driver, instance_uuid, quiet=True) != power_state.RUNNING:
            LOG.error("Instance %s on %s: cannot reboot: %s", instance_uuid, host, exc)
            _fail(db_url, instance_uuid, host, op, begun.event_id, exc, VmState.ERROR)
            raise
        LOG.warning("Instance %s on %s: reboot failed but it is running", instance_uuid, host)
        with session_scope(db_url) as session:
            actions.add_fault(session, instance_uuid, exc, host)
    power = guest_power_state(driver, instance_uuid, quiet=True)
    return _finish(
        db_url,
        instance_uuid,
        host,
        op,
        begun.event_id,
        (started,),
        lambda instance: {"vm_state": new_vm_state, "power_state": power},
    )


def abort(
    db_url: str, instance_uuid: str, request_id: str, host: str, op: Operation, exc: BaseException
) -> bool:
    """Undo a step of ``op`` that failed outside its own handling (delivery limit, wrong
    host): as the operation's own failure path, but only while the instance is still in
    one of its task_states. Idempotent: False when there was nothing left to undo. Serves
    every step built on ``Operation`` (lifecycle, soft delete, shelve)."""
    with session_scope(db_url) as session:
        try:
            instance = _locked(session, instance_uuid)
        except InstanceNotFound:
            return False
        if instance.deleted or instance.task_state not in op.tasks:
            return False
        _revert(session, instance_uuid, op, op.on_failure(exc, instance.vm_state))
        actions.add_fault(session, instance_uuid, exc, host)
        actions.record_event(session, instance_uuid, request_id, op.event, host, exc)
    LOG.warning("Instance %s on %s: %s aborted: %s", instance_uuid, host, op.name, exc)
    return True


# -- the step skeleton ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Begun:
    event_id: int | None
    vm_state: str


def _run(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    request_id: str,
    host: str,
    op: Operation,
    act: Callable[[], None],
    final: FinalValues,
    none_if_off: bool = False,
) -> str:
    begun = _begin(db_url, instance_uuid, request_id, host, op, (op.task,))
    if begun is None:
        return SKIPPED
    try:
        act()
        power = guest_power_state(driver, instance_uuid)
    except Exception as exc:
        LOG.warning("Instance %s on %s: %s failed: %s", instance_uuid, host, op.name, exc)
        vm_state = op.on_failure(exc, begun.vm_state)
        _fail(db_url, instance_uuid, host, op, begun.event_id, exc, vm_state)
        raise
    expected: tuple[str | None, ...] = op.tasks
    if none_if_off and power in power_state.NOT_RUNNING:
        expected = (*expected, None)
    return _finish(
        db_url,
        instance_uuid,
        host,
        op,
        begun.event_id,
        expected,
        lambda instance: {**final(instance), "power_state": power},
    )


def _locked(session: Session, instance_uuid: str) -> Instance:
    """The instance row, locked until the transaction ends (SQLite: BEGIN IMMEDIATE)."""
    instance = session.scalars(
        select(Instance)
        .where(Instance.uuid == instance_uuid)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).first()
    if instance is None:
        raise InstanceNotFound(uuid=instance_uuid)
    return instance


def _begin(
    db_url: str,
    instance_uuid: str,
    request_id: str,
    host: str,
    op: Operation,
    expected: tuple[str, ...],
    **values: Any,
) -> _Begun | None:
    """Check the instance is here in one of the ``expected`` task_states (CAS, with
    ``values``), open the event. None: a redelivery or superseded message."""
    try:
        with session_scope(db_url) as session:
            instance = _locked(session, instance_uuid)
            if instance.deleted or instance.host != host or instance.task_state not in expected:
                LOG.info(
                    "Instance %s on %s: %s skipped, instance is %s/%s on %s",
                    instance_uuid,
                    host,
                    op.name,
                    instance.vm_state,
                    instance.task_state,
                    instance.host,
                )
                return None
            vm_state = instance.vm_state
            cas_update(session, instance_uuid, expected_task_state=expected, **values)
            event_id = actions.start_event(session, instance_uuid, request_id, op.event, host)
            return _Begun(event_id, vm_state)
    except (InstanceNotFound, UnexpectedTaskStateError):
        return None


def _finish(
    db_url: str,
    instance_uuid: str,
    host: str,
    op: Operation,
    event_id: int | None,
    expected: tuple[str | None, ...],
    final: FinalValues,
) -> str:
    try:
        with session_scope(db_url) as session:
            values = final(_locked(session, instance_uuid))
            cas_update(
                session, instance_uuid, expected_task_state=expected, task_state=None, **values
            )
            if event_id is not None:
                actions.finish_event(session, event_id, actions.SUCCESS, finish_action=True)
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        return _superseded(db_url, instance_uuid, host, op, event_id, exc)
    LOG.info("Instance %s on %s: %s done, now %s", instance_uuid, host, op.name, values)
    return DONE


def _superseded(
    db_url: str,
    instance_uuid: str,
    host: str,
    op: Operation,
    event_id: int | None,
    exc: BaseException,
) -> str:
    """Another request (a delete, a hard reboot) took the instance over mid-step: leave
    its state to that request, close our event with the conflict."""
    LOG.info("Instance %s on %s: %s superseded: %s", instance_uuid, host, op.name, exc)
    if event_id is not None:
        result, tb, details = actions.outcome(exc)
        with session_scope(db_url) as session:
            actions.finish_event(session, event_id, result, tb, details, finish_action=True)
    return SUPERSEDED


def _fail(
    db_url: str,
    instance_uuid: str,
    host: str,
    op: Operation,
    event_id: int | None,
    exc: BaseException,
    vm_state: str | None,
) -> None:
    """Nova's ``reverts_task_state`` + ``wrap_instance_fault`` + the event's Error."""
    with session_scope(db_url) as session:
        try:
            instance = _locked(session, instance_uuid)
        except InstanceNotFound:
            return
        if not instance.deleted and instance.task_state in op.tasks:
            _revert(session, instance_uuid, op, vm_state)
        actions.add_fault(session, instance_uuid, exc, host)
        if event_id is not None:
            result, tb, details = actions.outcome(exc)
            actions.finish_event(session, event_id, result, tb, details, finish_action=True)


def _revert(session: Session, instance_uuid: str, op: Operation, vm_state: str | None) -> None:
    values: dict[str, Any] = {"task_state": None}
    if vm_state is not None:
        values["vm_state"] = vm_state
    cas_update(session, instance_uuid, expected_task_state=op.tasks, **values)


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
