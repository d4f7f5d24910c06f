"""What a compute host does at start for work a crash interrupted (Nova's ``init_host`` →
``_init_instance``, NOVA_BEHAVIOUR.md §7.4), then for guests of deleted servers. Before
all, guests of servers evacuated away while the host was down are destroyed and the
evacuations' allocations here dropped (``compute/recovery/evacuated.py``).

Nova's compute acks an RPC cast when it receives it, so after a crash the message of an
interrupted operation is gone and ``init_host`` is the only thing that can finish or
undo it. novaq's compute steps ack late: the message of the step that was running comes
back after the restart (and a message still queued is delivered as usual), bounded by
``max_delivery_attempts`` whose errback undoes the step. So each state below is handled
by one of three rules, chosen by what the step's message does when it arrives after us:

1. The step resumes from its own in-flight state (``_begin`` of ``compute/lifecycle.py``
   accepts it) and would skip harmlessly if we acted first: act as Nova does. The
   redelivered step then finds the task_state moved and returns ``skipped``; the
   instance is already in a state that matches the hypervisor.
2. The step cannot resume from where it died (a build or an unshelve caught in
   ``spawning``, a shelve caught in its offload half): its message is as good as gone,
   since the redelivery would be skipped and the instance stay stuck. Act as Nova does.
3. The step resumes, and acting first would make it fail: every move step moves
   task_state by a compare-and-swap that raises when the state is not its own, and the
   move's errback then errors the server out (the integration test "a worker killed in
   the middle of a resize resumes" relies on the redelivery). A move is therefore left
   to its messages while its migration is in progress; Nova's two resize rows apply
   only once no migration of the instance is in progress, when no step can follow.

=================================  ==================================================
found at start (host = this host)  action
=================================  ==================================================
vm SOFT_DELETED; vm ERROR unless   left alone (Nova); so ``restoring`` (vm
task deleting/resize_migrating     SOFT_DELETED) is left to its message
vm BUILDING, task spawning /       build errored out: guest destroyed, claim released,
networking / block_device_mapping  ERROR, fault (``compute.build.fail_build``)
vm BUILDING, task scheduling       left to the build message still queued here
task spawning (an unshelve)        the same as an interrupted build (Nova: ERROR)
task deleting                      the delete completed (failure → ERROR)
reboot_pending (vm active),        reboot re-issued, hard unless the guest runs and
reboot_pending_hard, or            the reboot was soft (``reboot_pending_hard`` first,
reboot_started(_hard) while the    as Nova's ``_retry_reboot``)
guest is not running
reboot_started(_hard) or pausing   ACTIVE, task None (Nova)
or unpausing, guest running
unpausing, guest paused            unpause re-run (Nova)
rebooting(_hard), guest running    left to its message (Nova leaves it too)
powering-off / powering-on         stop / start re-run (Nova)
soft-deleting                      soft delete re-run: the API already wrote
                                   ``deleted_at``, only finishing it is consistent
shelving_offloading                offload re-run (the guest may already be gone)
pausing, suspending, resuming,     Nova says nothing. Guest already where the
rescuing, unrescuing, shelving     operation takes it → the step is re-run (its driver
                                   call is then a no-op and it writes the final state);
                                   otherwise the operation did not happen: task None,
                                   vm_state kept. ``sync_power_states`` (which runs at
                                   start) reconciles what is left, by Nova's table
unshelving                         left to the unshelve message (scheduler or host)
resize_prep, resize_migrating,     ``compute/recovery/moves.py``: Nova's two resize
any other move state               rows once no migration is in progress, else left
                                   to its messages
task None, power_state RUNNING,    with ``resume_guests_state_on_host_boot``:
guest not running                  ``compute/recovery/resume.py`` (the guest rebooted
                                   hard); failure → ERROR
=================================  ==================================================

Then, with settings, ``cleanup_running_deleted_instances`` runs once with the periodic
task's rules (``running_deleted_instance_action``/``_timeout``), as Nova's periodic
task runs at once on start. A re-run step records its event on the instance's latest
action (Nova's context fallback); one instance's failure is logged and the others go on.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute import lifecycle, shelve, soft_delete
from compute.build import destroy_quietly, fail_build
from compute.claims import release, retry_on_conflict
from compute.delete import terminate_instance
from compute.instance_state import cas_update, get_instance
from compute.lifecycle import guest_power_state
from compute.periodic import PeriodicContext
from compute.periodic.running_deleted import cleanup_running_deleted_instances
from compute.power import DEFAULT_SHUTDOWN_TIMEOUT_S
from compute.recovery.common import Found, Host
from compute.recovery.evacuated import (
    destroy_evacuated_instances,
    destroy_failed_evacuation_guests,
)
from compute.recovery.moves import recover_resize_migrating, recover_resize_prep
from compute.recovery.resume import NO_RESUME as NO_RESUME  # re-exported: it was defined here
from compute.recovery.resume import resume_safely
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from compute.steps import StepContext
from models import Instance, utcnow
from novaq.exceptions import BuildAbortError, NovaqError
from novaq.settings import Settings
from virt import power_state
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

INTERRUPTED_BUILD = (TaskState.SPAWNING, TaskState.NETWORKING, TaskState.BLOCK_DEVICE_MAPPING)
RECOVERY_REQUEST = "req-init-host"
INIT_HOST_EVENT = "compute_init_host"
REBOOT_STARTED_TASKS = (TaskState.REBOOT_STARTED, TaskState.REBOOT_STARTED_HARD)
ALLOW_HARD_REBOOT = (
    VmState.ACTIVE,
    VmState.STOPPED,
    VmState.PAUSED,
    VmState.SUSPENDED,
    VmState.ERROR,
)

#: A host step: ``(StepContext, instance_uuid, **options) -> outcome``.
Step = Callable[..., str]


class InterruptedByRestart(NovaqError):
    msg_fmt = "%(operation)s of instance %(uuid)s interrupted by a restart of %(host)s"


def recover_host(
    sessions: Sessions, driver: ComputeDriver, host: str, *, settings: Settings | None = None
) -> list[str]:
    """Recover every instance of ``host`` left mid-operation; returns what was done.
    Without ``settings``, ``resume_guests_state_on_host_boot`` counts as off (Nova's
    default) and guests of deleted servers are left to the periodic task."""
    rc = Host(sessions, driver, host, settings)
    done = _destroy_evacuated(rc)
    resume = settings is not None and settings.resume_guests_state_on_host_boot
    for found in _instances_of(sessions, host):
        lines = [_recover_safely(rc, found), resume_safely(rc, found.uuid) if resume else None]
        done += [line for line in lines if line]
    for line in done:
        LOG.warning("init_host on %s: %s", host, line)
    if settings is not None:
        done += _cleanup_deleted(rc, settings)
    return done


def _destroy_evacuated(rc: Host) -> list[str]:
    """Nova runs ``_destroy_evacuated_instances`` first (``compute/recovery/evacuated.py``)."""
    try:
        return destroy_evacuated_instances(rc) + destroy_failed_evacuation_guests(rc)
    except Exception:  # noqa: BLE001 - the other recoveries must still run
        LOG.exception("init_host on %s: cleanup of evacuated instances failed", rc.host)
        return []


def _instances_of(sessions: Sessions, host: str) -> list[Found]:
    with sessions() as session:
        rows = session.execute(
            select(Instance.uuid, Instance.vm_state, Instance.task_state)
            .where(Instance.host == host, Instance.deleted == 0)
            .order_by(Instance.id)
        ).all()
    return [Found(uuid, vm_state, task_state) for uuid, vm_state, task_state in rows]


def _recover_safely(rc: Host, found: Found) -> str | None:
    try:
        return _recover(rc, found)
    except Exception as exc:  # noqa: BLE001 - Nova: one instance must not block init_host
        LOG.exception("init_host on %s: could not recover instance %s", rc.host, found.uuid)
        return f"{found.uuid}: {found.task_state} recovery failed: {exc}"


def _recover(rc: Host, found: Found) -> str | None:
    vm, task = found.vm_state, found.task_state
    if vm == VmState.SOFT_DELETED:
        return None
    if vm == VmState.ERROR and task not in (TaskState.RESIZE_MIGRATING, TaskState.DELETING):
        return None
    if vm == VmState.BUILDING:
        return _interrupted_build(rc, found) if task in INTERRUPTED_BUILD else None
    if task == TaskState.SPAWNING:
        return _interrupted_unshelve(rc, found)
    handler = _HANDLERS.get(task or "")
    return handler(rc, found) if handler is not None else None


# -- builds and deletes ------------------------------------------------------------------


def _interrupted_build(rc: Host, found: Found) -> str | None:
    destroy_quietly(rc.driver, found.uuid)
    error = BuildAbortError(uuid=found.uuid, reason=f"interrupted by a restart of {rc.host}")
    if fail_build(
        rc.sessions,
        found.uuid,
        RECOVERY_REQUEST,
        error,
        host=rc.host,
        event=INIT_HOST_EVENT,
    ):
        with rc.sessions() as session:  # the build step's own event died with its worker
            actions.close_open_events(session, found.uuid, error)
        return f"{found.uuid}: interrupted build -> ERROR"
    return None


def _interrupted_unshelve(rc: Host, found: Found) -> str | None:
    """Nova's "task spawning → ERROR", done as novaq ends an interrupted build: the
    half-spawned guest destroyed, the claim released, host and node nulled, a fault."""
    destroy_quietly(rc.driver, found.uuid)
    error = InterruptedByRestart(operation="Unshelve", uuid=found.uuid, host=rc.host)
    request_id = _last_request(rc, found.uuid)

    def work(session: Session) -> bool:
        instance = get_instance(session, found.uuid, lock=True)
        if instance.deleted or instance.task_state != TaskState.SPAWNING:
            return False
        release(session, found.uuid)
        instance.vm_state, instance.task_state = VmState.ERROR, None
        instance.host = instance.node = None
        instance.updated_at = utcnow()
        actions.add_fault(session, found.uuid, error, rc.host)
        actions.record_event(session, found.uuid, request_id, INIT_HOST_EVENT, rc.host, error)
        return True

    if retry_on_conflict(rc.sessions, work):
        return f"{found.uuid}: interrupted unshelve -> ERROR"
    return None


def _complete_delete(rc: Host, found: Found) -> str:
    LOG.info(
        "Service started deleting the instance %s during the previous run, but did not "
        "finish. Restarting the deletion now.",
        found.uuid,
    )
    request_id = _last_request(rc, found.uuid)
    terminate_instance(StepContext(rc.sessions, rc.driver, rc.host, request_id), found.uuid)
    return f"{found.uuid}: interrupted delete completed"


# -- reboot, pause, unpause (Nova's rows) -----------------------------------------------------


def _recover_reboot(rc: Host, found: Found) -> str | None:
    """Nova's ``_retry_reboot``, then its "running and reboot started → ACTIVE"."""
    task, vm = found.task_state, found.vm_state
    power = guest_power_state(rc.driver, found.uuid)
    running = power == power_state.RUNNING
    pending_soft = task == TaskState.REBOOT_PENDING and vm == VmState.ACTIVE
    pending_hard = task == TaskState.REBOOT_PENDING_HARD and vm in ALLOW_HARD_REBOOT
    started_not_running = task in REBOOT_STARTED_TASKS and not running
    if pending_soft or pending_hard or started_not_running:
        hard = not running or task not in lifecycle.REBOOT.tasks
        if task in lifecycle.REBOOT.tasks and hard:
            _set_task(rc, found, TaskState.REBOOT_PENDING_HARD)
        request_id = _last_request(rc, found.uuid)
        step = StepContext(rc.sessions, rc.driver, rc.host, request_id)
        outcome = lifecycle.reboot_instance(step, found.uuid, hard)
        return f"{found.uuid}: reboot re-issued ({'hard' if hard else 'soft'}, {outcome})"
    if running and task in REBOOT_STARTED_TASKS:
        return _clear(rc, found, done=True, vm_state=VmState.ACTIVE)
    return None  # ``rebooting(_hard)`` with the guest running: its message will come


def _recover_unpausing(rc: Host, found: Found) -> str | None:
    power = guest_power_state(rc.driver, found.uuid)
    if power == power_state.RUNNING:
        return _clear(rc, found, done=True, vm_state=VmState.ACTIVE)
    if power == power_state.PAUSED:
        return _rerun(rc, found, lifecycle.unpause_instance)
    return _clear(rc, found, done=False)


def _recover_pausing(rc: Host, found: Found) -> str | None:
    if guest_power_state(rc.driver, found.uuid) == power_state.RUNNING:
        return _clear(rc, found, done=False, vm_state=VmState.ACTIVE)  # it did not pause
    return _finish_or_forget(rc, found)


# -- operations Nova's init_host says nothing about -------------------------------------------


def _shelve_step(rc: Host) -> Step:
    # The shelve step offloads at once with Nova's default shelved_offload_time of 0.
    offload = rc.settings is None or rc.settings.shelved_offload_time == 0
    return functools.partial(shelve.shelve_instance, offload=offload)


#: task_state → (the host step, the guest power states it leads to).
_SILENT: dict[str, tuple[Callable[[Host], Step], frozenset[int]]] = {
    TaskState.PAUSING: (lambda rc: lifecycle.pause_instance, frozenset({power_state.PAUSED})),
    # A suspended guest is off with its memory saved, and reports SHUTDOWN (virt.driver).
    TaskState.SUSPENDING: (
        lambda rc: lifecycle.suspend_instance,
        frozenset({power_state.SHUTDOWN}),
    ),
    TaskState.RESUMING: (lambda rc: lifecycle.resume_instance, frozenset({power_state.RUNNING})),
    # Whether the guest runs or is off, only the driver knows whether it is the rescue
    # domain yet: the rescue step is re-run (a no-op beyond starting it once it is).
    TaskState.RESCUING: (
        lambda rc: lifecycle.rescue_instance,
        frozenset({power_state.RUNNING, *power_state.OFF}),
    ),
    TaskState.UNRESCUING: (
        lambda rc: lifecycle.unrescue_instance,
        frozenset({power_state.RUNNING}),
    ),
    TaskState.SHELVING: (_shelve_step, power_state.OFF),
}


def _finish_or_forget(rc: Host, found: Found) -> str | None:
    """The guest is where the operation takes it: finish the step (its driver call is
    a no-op there). Otherwise the operation did not happen: task cleared, vm kept."""
    make_step, done_when = _SILENT[found.task_state or ""]
    if guest_power_state(rc.driver, found.uuid) in done_when:
        return _rerun(rc, found, make_step(rc))
    return _clear(rc, found, done=False)


# -- guests of deleted servers ----------------------------------------------------------------


def _cleanup_deleted(rc: Host, settings: Settings) -> list[str]:
    try:
        result = cleanup_running_deleted_instances(
            PeriodicContext(rc.sessions, settings, rc.host, rc.driver)
        )
    except Exception:  # noqa: BLE001 - the periodic task tries again
        LOG.exception("init_host on %s: cleanup of running deleted instances failed", rc.host)
        return []
    action, failed = result["action"], set(result["failed"])
    return [
        f"{uuid}: deleted but on the hypervisor -> {action}" + (" failed" if uuid in failed else "")
        for uuid in result["instances"]
    ]


# -- helpers ----------------------------------------------------------------------------------


def _rerun(rc: Host, found: Found, step: Step, clean_shutdown: bool = False) -> str:
    """Run the interrupted host step again, attached to the instance's latest action; a
    step that shuts the guest down waits for it as configured (``shutdown_timeout``)."""
    LOG.info(
        "Instance %s in transitional state %s at start-up: retrying it",
        found.uuid,
        found.task_state,
    )
    timeout = DEFAULT_SHUTDOWN_TIMEOUT_S
    if clean_shutdown and rc.settings is not None:
        timeout = rc.settings.shutdown_timeout
    request_id = _last_request(rc, found.uuid)
    outcome = step(StepContext(rc.sessions, rc.driver, rc.host, request_id, timeout), found.uuid)
    return f"{found.uuid}: interrupted {found.task_state} re-run ({outcome})"


def _clear(rc: Host, found: Found, done: bool, **values: Any) -> str | None:
    """Task None (and ``values``), by compare-and-swap on the task found; the operation
    has ended there (``done``: where it was going, else interrupted), and its action says
    so."""
    LOG.warning(
        "Instance %s in transitional state (%s) at start-up: clearing task state",
        found.uuid,
        found.task_state,
    )
    with rc.sessions() as session:
        cas_update(
            session, found.uuid, expected_task_state=[found.task_state], task_state=None, **values
        )
        _end_action(session, rc, found, done)
    state = values.get("vm_state", found.vm_state)
    return f"{found.uuid}: {found.task_state} -> {state}, task cleared"


def _end_action(session: Session, rc: Host, found: Found, done: bool) -> None:
    """End the interrupted request's action (no step of it will: it ended here)."""
    request_id = actions.latest_request_id(session, found.uuid)
    if request_id is None:
        return
    operation = str(found.task_state or "operation")
    error = (
        None if done else InterruptedByRestart(operation=operation, uuid=found.uuid, host=rc.host)
    )
    actions.end_open_action(session, found.uuid, request_id, INIT_HOST_EVENT, rc.host, error)


def _ends_the_move(
    recover: Callable[[Host, Found], str | None],
) -> Callable[[Host, Found], str | None]:
    """A move recovered here has ended (no step of it follows): its action says so."""

    def run(rc: Host, found: Found) -> str | None:
        recovered = recover(rc, found)
        if recovered is not None:
            with rc.sessions() as session:
                _end_action(session, rc, found, done=False)
        return recovered

    return run


def _set_task(rc: Host, found: Found, task_state: str) -> None:
    with rc.sessions() as session:
        cas_update(
            session, found.uuid, expected_task_state=[found.task_state], task_state=task_state
        )


def _last_request(rc: Host, uuid: str) -> str:
    """The request whose instance action records what recovery does (the interrupted one)."""
    with rc.sessions() as session:
        return actions.latest_request_id(session, uuid) or RECOVERY_REQUEST


def _rerun_with(step: Step, clean_shutdown: bool = False) -> Callable[[Host, Found], str]:
    return lambda rc, found: _rerun(rc, found, step, clean_shutdown)


_HANDLERS: dict[str, Callable[[Host, Found], str | None]] = {
    TaskState.DELETING: _complete_delete,
    **{task: _recover_reboot for task in (*lifecycle.REBOOT.tasks, TaskState.REBOOTING_HARD)},
    TaskState.REBOOT_PENDING_HARD: _recover_reboot,
    TaskState.REBOOT_STARTED_HARD: _recover_reboot,
    TaskState.PAUSING: _recover_pausing,
    TaskState.UNPAUSING: _recover_unpausing,
    **{task: _finish_or_forget for task in _SILENT if task != TaskState.PAUSING},
    TaskState.POWERING_OFF: _rerun_with(lifecycle.stop_instance, clean_shutdown=True),
    TaskState.POWERING_ON: _rerun_with(lifecycle.start_instance),
    TaskState.SOFT_DELETING: _rerun_with(soft_delete.soft_delete_instance),
    TaskState.SHELVING_OFFLOADING: _rerun_with(shelve.shelve_offload_instance, clean_shutdown=True),
    TaskState.RESIZE_PREP: _ends_the_move(recover_resize_prep),
    TaskState.RESIZE_MIGRATING: _ends_the_move(recover_resize_migrating),
}
