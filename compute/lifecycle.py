"""Power and lifecycle operations on a compute host: Nova's ``stop_instance``,
``start_instance``, ``reboot_instance``, ``pause/unpause_instance``,
``suspend/resume_instance`` and ``rescue/unrescue_instance``, each one ``Step`` run by
``compute.steps.run_step``.

The API has already set the operation's task_state (``powering-off``, ``pausing``, …);
the runner checks it under the row lock (else ``skipped``), opens the
``compute_<method>`` event, calls the driver, reads the guest's power state back and
swaps the task_state for the final vm_state, task None and that power state.

A driver failure ends as Nova ends it (NOVA_BEHAVIOUR.md §2.3): ``reverts_task_state``
(task None, vm unchanged) for stop, start, pause and unpause; ``_error_out_instance_on_
exception`` (ERROR, or the previous vm_state for ``NotImplementedError``) for suspend,
resume and unrescue; ERROR for rescue and for a reboot that leaves the guest not
running. Always with a fault and the event closed ``Error`` (traceback kept), and the
exception re-raised.

Rescue is Nova's libvirt rescue (``ComputeDriver.rescue``): the guest's domain saved,
a rescue domain booted from the rescue image (the instance's own image) with the
original root disk attached second: RESCUED with power RUNNING. Unrescue restores the
saved domain and starts it (ACTIVE). Not done: a rescue password (no metadata service).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.failure_policies import (
    FailurePolicy,
    error,
    error_unless_not_implemented,
    keep_vm_state,
)
from compute.images import image_spec
from compute.power import current_guest_spec, instance_power_off_timeout
from compute.states import TaskState, VmState
from compute.steps import (
    DONE,
    SKIPPED,
    SUPERSEDED,
    Act,
    Final,
    Step,
    StepContext,
    StepRun,
    guest_power_state,
    run_step,
    to,
)
from models import Instance, utcnow
from novaq.exceptions import NovaqError
from virt import power_state

__all__ = ["DONE", "SKIPPED", "SUPERSEDED", "guest_power_state"]

LOG = logging.getLogger(__name__)

SHELVED_KEYS = ("shelved_at", "shelved_image_id", "shelved_host")


class InstanceNotRescuable(NovaqError):
    msg_fmt = "Instance %(uuid)s cannot be rescued: %(reason)s"
    code = 400


def host_step(
    name: str,
    task: str,
    act: Act,
    final: Final,
    on_failure: FailurePolicy = keep_vm_state,
    *more: str,
    **options: Any,
) -> Step:
    """A step named as Nova's ``<name>_instance`` (its event ``compute_<name>_instance``)
    owning ``task`` and the ``more`` task_states."""
    return Step(
        name, f"compute_{name}_instance", task, (task, *more), act, final, on_failure, **options
    )


def power_off(ctx: StepContext, run: StepRun, clean_shutdown: bool = True) -> None:
    """A clean power-off (``compute.power``) waited for up to ``ctx.shutdown_timeout_s``
    unless the image says otherwise, then destroy; unclean destroys at once."""
    with ctx.sessions() as session:
        timeout = instance_power_off_timeout(
            session, run.instance_uuid, ctx.shutdown_timeout_s, clean_shutdown
        )
    ctx.driver.power_off(run.instance_uuid, timeout)


def _stop(ctx: StepContext, run: StepRun) -> None:
    power_off(ctx, run, bool(run.params.get("clean_shutdown", True)))


def _started(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    values: dict[str, Any] = {"vm_state": VmState.ACTIVE}
    meta = dict(instance.system_metadata or {})
    if any(key in meta for key in SHELVED_KEYS):
        values["system_metadata"] = {k: v for k, v in meta.items() if k not in SHELVED_KEYS}
    return values


def _suspended(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    instance.old_vm_state = instance.vm_state  # for resume
    return {"vm_state": VmState.SUSPENDED, "system_metadata": instance.system_metadata}


def _resumed(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    vm_state = instance.old_vm_state or VmState.ACTIVE
    instance.old_vm_state = None
    return {"vm_state": vm_state, "system_metadata": instance.system_metadata}


def _rescue(ctx: StepContext, run: StepRun) -> None:
    uuid = run.instance_uuid
    try:
        # Nova's rescue: a clean power-off of the guest first, then the rescue domain.
        power_off(ctx, run)
        ref = run.params.get("rescue_image_ref")
        with ctx.sessions() as session:
            spec = current_guest_spec(session, uuid)
            image = image_spec(session, ref) if ref is not None else None
        ctx.driver.rescue(spec, image or spec.image)
    except Exception as exc:
        raise InstanceNotRescuable(uuid=uuid, reason=f"Driver Error: {exc}") from exc


def _rescued(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    return {"vm_state": VmState.RESCUED, "launched_at": utcnow()}


def _reboot_step(task: str, pending: str, started: str) -> Step:
    """``rebooting`` → ``reboot_pending`` → ``reboot_started`` → ACTIVE (RESCUED stays
    RESCUED); a redelivered reboot resumes from any of the three."""

    def begin(ctx: StepContext, uuid: str) -> dict[str, Any]:
        return {"task_state": pending, "power_state": guest_power_state(ctx.driver, uuid, True)}

    def act(ctx: StepContext, run: StepRun) -> None:
        uuid = run.instance_uuid
        run.advance((pending,), task_state=started)
        try:
            with ctx.sessions() as session:
                spec = current_guest_spec(session, uuid)
            ctx.driver.reboot(spec, bool(run.params.get("hard")))
        except Exception as exc:
            if guest_power_state(ctx.driver, uuid, quiet=True) != power_state.RUNNING:
                LOG.error("Instance %s on %s: cannot reboot: %s", uuid, ctx.host, exc)
                raise
            LOG.warning("Instance %s on %s: reboot failed but it is running", uuid, ctx.host)
            with ctx.sessions() as session:
                actions.add_fault(session, uuid, exc, ctx.host)

    def final(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
        rescued = run.vm_state == VmState.RESCUED
        return {"vm_state": VmState.RESCUED if rescued else VmState.ACTIVE}

    return host_step(
        "reboot",
        task,
        act,
        final,
        error,
        pending,
        started,
        begin_tasks=(task, pending, started),
        begin_values=begin,
        finish_tasks=(started,),
        quiet_power=True,
    )


def _call(method: str) -> Act:
    """The act that is one driver method of the instance's uuid."""
    return lambda ctx, run: getattr(ctx.driver, method)(run.instance_uuid)


STOP = host_step("stop", TaskState.POWERING_OFF, _stop, to(VmState.STOPPED), none_if_off=True)
START = host_step("start", TaskState.POWERING_ON, _call("power_on"), _started)
REBOOT = _reboot_step(TaskState.REBOOTING, TaskState.REBOOT_PENDING, TaskState.REBOOT_STARTED)
REBOOT_HARD = _reboot_step(
    TaskState.REBOOTING_HARD, TaskState.REBOOT_PENDING_HARD, TaskState.REBOOT_STARTED_HARD
)
PAUSE = host_step("pause", TaskState.PAUSING, _call("pause"), to(VmState.PAUSED))
UNPAUSE = host_step("unpause", TaskState.UNPAUSING, _call("unpause"), to(VmState.ACTIVE))
SUSPEND = host_step(
    "suspend",
    TaskState.SUSPENDING,
    _call("suspend"),
    _suspended,
    error_unless_not_implemented(None),
)
RESUME = host_step(
    "resume", TaskState.RESUMING, _call("resume"), _resumed, error_unless_not_implemented(None)
)
RESCUE = host_step("rescue", TaskState.RESCUING, _rescue, _rescued, error)
#: Nova's ``trigger_crash_dump``: an NMI into the guest, no state of the instance changed
#: (what the NMI does is the guest's own configuration); a refusal leaves a fault.
TRIGGER_CRASH_DUMP = Step(
    "trigger_crash_dump",
    "compute_trigger_crash_dump",
    None,
    (),
    _call("trigger_crash_dump"),
    lambda session, instance, run: None,
    any_task=True,
    read_power=False,
    once_per_request=True,
)
UNRESCUE = host_step(
    "unrescue",
    TaskState.UNRESCUING,
    _call("unrescue"),
    to(VmState.ACTIVE),
    error_unless_not_implemented(VmState.ACTIVE),
)


# -- the operations, as their callers name them ------------------------------------------


def stop_instance(ctx: StepContext, instance_uuid: str, clean_shutdown: bool = True) -> str:
    """Power off: ``powering-off`` → STOPPED. ``clean_shutdown`` False (``force_stop``)
    destroys at once. As Nova, the final compare-and-swap also accepts task None when
    the guest is off (another operation may have cleared it)."""
    return run_step(ctx, STOP, instance_uuid, clean_shutdown=clean_shutdown)


def start_instance(ctx: StepContext, instance_uuid: str) -> str:
    """Power on: ``powering-on`` → ACTIVE, dropping shelve keys from system_metadata."""
    return run_step(ctx, START, instance_uuid)


def pause_instance(ctx: StepContext, instance_uuid: str) -> str:
    return run_step(ctx, PAUSE, instance_uuid)


def unpause_instance(ctx: StepContext, instance_uuid: str) -> str:
    return run_step(ctx, UNPAUSE, instance_uuid)


def suspend_instance(ctx: StepContext, instance_uuid: str) -> str:
    """Managed save: ``suspending`` → SUSPENDED, the previous vm_state stashed in
    system_metadata ``old_vm_state`` for resume."""
    return run_step(ctx, SUSPEND, instance_uuid)


def resume_instance(ctx: StepContext, instance_uuid: str) -> str:
    """``resuming`` → the stashed ``old_vm_state`` (ACTIVE when none), popped."""
    return run_step(ctx, RESUME, instance_uuid)


def rescue_instance(
    ctx: StepContext, instance_uuid: str, rescue_image_ref: str | None = None
) -> str:
    """``rescuing`` → RESCUED: the guest boots the rescue image (``rescue_image_ref``,
    else the instance's own, as Nova's ``_get_rescue_image``); ``launched_at`` reset as
    Nova does. A driver error is ``InstanceNotRescuable`` and ERRORs the instance."""
    return run_step(ctx, RESCUE, instance_uuid, rescue_image_ref=rescue_image_ref)


def unrescue_instance(ctx: StepContext, instance_uuid: str) -> str:
    """``unrescuing`` → ACTIVE: the guest's own domain back, started."""
    return run_step(ctx, UNRESCUE, instance_uuid)


def trigger_crash_dump(ctx: StepContext, instance_uuid: str) -> str:
    """Inject an NMI; ``TriggerCrashDumpNotSupported`` or ``InstanceNotRunning`` from the
    driver are recorded as the instance's fault and the event's Error."""
    return run_step(ctx, TRIGGER_CRASH_DUMP, instance_uuid)


def reboot_instance(ctx: StepContext, instance_uuid: str, hard: bool = False) -> str:
    """A failed reboot that leaves the guest running keeps the instance as it was, with a
    fault (Nova records the event as Success then); otherwise the instance goes to ERROR.
    The driver gets the instance's guest as it is now (``compute.power.
    current_guest_spec``): a hard reboot defines it again from fresh XML, as Nova's does."""
    return run_step(ctx, REBOOT_HARD if hard else REBOOT, instance_uuid, hard=hard)
