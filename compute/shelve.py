"""The shelve family on a compute host: Nova's ``shelve_instance``,
``shelve_offload_instance`` and ``unshelve_instance`` (NOVA_BEHAVIOUR.md §2.4).

Each is one step written as the power operations of ``compute/lifecycle.py`` are: a
compare-and-swap on the task_state the API (or the scheduler) set, the
``compute_<method>`` event, the driver, a final compare-and-swap; a failure ends as
Nova's ``reverts_task_state`` + ``wrap_instance_fault`` (task None, vm_state unchanged,
a fault, the event closed ``Error``), and the exception is re-raised.

- shelve: the guest powered off, the "snapshot" recorded (there is no image service: a
  generated ``shelved_image_id``, ``shelved_at`` and ``shelved_host`` in
  system_metadata), vm SHELVED. With ``shelved_offload_time == 0`` (Nova's default) the
  step goes on at once with the offload (task ``shelving_offloading``), as Nova does in
  the same call.
- shelve_offload: the guest powered off, destroyed and undefined; then in ONE
  transaction every allocation and PCI device of the instance released, vm
  SHELVED_OFFLOADED, task None, host and node None.
- unshelve (offloaded): the scheduler has claimed a host and set it (task still
  ``unshelving``); here task ``spawning``, the guest spawned with the instance's
  devices, vm ACTIVE, the shelve keys dropped. A spawn failure releases the claim and
  nulls host/node (the instance stays SHELVED_OFFLOADED), task None, fault.

The guest is powered off as Nova does: a clean shutdown waited for up to
``shutdown_timeout_s`` (``compute.power``: the image's ``os_shutdown_timeout`` or
``[DEFAULT] shutdown_timeout``), then destroyed; the driver asks only a running guest,
so a paused one is powered off at once (Nova's "unclean if paused").
"""

from __future__ import annotations

import logging
import uuid as uuid_module
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.build import destroy_deleted_guest, destroy_quietly, guest_spec
from compute.claims import release, retry_on_conflict
from compute.failure_policies import keep_vm_state
from compute.instance_state import cas_update
from compute.lifecycle import SHELVED_KEYS, host_step, power_off
from compute.pci import held_devices
from compute.power import instance_power_off_timeout
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from compute.steps import (
    Step,
    StepContext,
    StepRun,
    close_event,
    guest_power_state,
    locked,
    run_step,
)
from models import Instance, utcnow
from novaq.exceptions import InstanceNotFound

LOG = logging.getLogger(__name__)


def _snapshot(instance: Instance, host: str) -> dict[str, Any]:
    """The shelve "snapshot" (no image service): a generated image id and where/when."""
    meta = dict(instance.system_metadata or {})
    meta.update(
        shelved_at=utcnow().isoformat(),
        shelved_image_id=str(uuid_module.uuid4()),
        shelved_host=host,
    )
    return {"vm_state": VmState.SHELVED, "system_metadata": meta}


def _offload_guest(ctx: StepContext, run: StepRun) -> None:
    """Nova's ``_shelve_offload_instance``: power off, destroy, delete the files."""
    uuid = run.instance_uuid
    if ctx.driver.instance_exists(uuid):  # a guest already gone is offloaded
        with ctx.sessions() as session:
            timeout = instance_power_off_timeout(session, uuid, ctx.shutdown_timeout_s)
        ctx.driver.power_off(uuid, timeout)
        ctx.driver.destroy(uuid)
    ctx.driver.delete_instance_files(uuid)  # unshelve spawns anew, maybe elsewhere


def _offloaded(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    """In ONE transaction with the final state: every allocation and PCI device of the
    instance released, host and node None."""
    release(session, run.instance_uuid)
    LOG.info("Instance %s offloaded from %s", run.instance_uuid, run.ctx.host)
    return {"vm_state": VmState.SHELVED_OFFLOADED, "host": None, "node": None}


def _shelve(ctx: StepContext, run: StepRun) -> None:
    power_off(ctx, run)
    if run.params.get("offload"):
        # Nova's shelved_offload_time == 0: SHELVED, then offloaded in the same step.
        power = guest_power_state(ctx.driver, run.instance_uuid)
        run.advance(
            (TaskState.SHELVING,),
            lambda instance: _snapshot(instance, ctx.host),
            task_state=TaskState.SHELVING_OFFLOADING,
            power_state=power,
        )
        _offload_guest(ctx, run)


def _shelved(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    if run.params.get("offload"):
        return _offloaded(session, instance, run)
    return _snapshot(instance, run.ctx.host)


def _spawn(ctx: StepContext, run: StepRun) -> None:
    uuid = run.instance_uuid
    with ctx.sessions() as session:
        instance = locked(session, uuid)
        devices = held_devices(session, uuid)
        spec = guest_spec(session, instance, tuple(d.address for d in devices))
    ctx.driver.spawn(spec)


def _unshelved(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    meta = dict(instance.system_metadata or {})
    return {
        "vm_state": VmState.ACTIVE,
        "system_metadata": {k: v for k, v in meta.items() if k not in SHELVED_KEYS},
    }


def _spawn_failed(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    destroy_quietly(ctx.driver, run.instance_uuid)
    undo_unshelve(ctx.sessions, run.instance_uuid, ctx.host, exc, run.event_id)


def _deleted_while_spawning(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    close_event(ctx, run, exc)
    destroy_deleted_guest(ctx, run.instance_uuid)  # take the guest back down


def _abort_unshelve(
    sessions: Sessions,
    step: Step,
    instance_uuid: str,
    request_id: str,
    host: str,
    exc: BaseException,
) -> bool:
    """An unshelve is failed as ``fail_unshelve`` fails it (claim released)."""
    return fail_unshelve(sessions, instance_uuid, request_id, host, exc, step.event)


SHELVE = host_step(
    "shelve", TaskState.SHELVING, _shelve, _shelved, keep_vm_state, TaskState.SHELVING_OFFLOADING
)
SHELVE_OFFLOAD = host_step(
    "shelve_offload",
    TaskState.SHELVING_OFFLOADING,
    lambda ctx, run: _offload_guest(ctx, run),
    _offloaded,
)
UNSHELVE = host_step(
    "unshelve",
    TaskState.UNSHELVING,
    _spawn,
    _unshelved,
    keep_vm_state,
    TaskState.SPAWNING,
    begin_values=lambda ctx, uuid: {"task_state": TaskState.SPAWNING},
    finish_tasks=(TaskState.SPAWNING,),
    undo=_spawn_failed,
    on_superseded=_deleted_while_spawning,
    abort=_abort_unshelve,
)


def shelve_instance(ctx: StepContext, instance_uuid: str, offload: bool = True) -> str:
    """``shelving`` → SHELVED, or (``offload``: Nova's ``shelved_offload_time == 0``)
    SHELVED/``shelving_offloading`` → SHELVED_OFFLOADED in the same step."""
    return run_step(ctx, SHELVE, instance_uuid, offload=offload)


def shelve_offload_instance(ctx: StepContext, instance_uuid: str) -> str:
    """SHELVED/``shelving_offloading`` → SHELVED_OFFLOADED, nothing left on this host."""
    return run_step(ctx, SHELVE_OFFLOAD, instance_uuid)


def unshelve_instance(ctx: StepContext, instance_uuid: str) -> str:
    """The claimed SHELVED_OFFLOADED instance spawned here: ``unshelving`` →
    ``spawning`` → ACTIVE."""
    return run_step(ctx, UNSHELVE, instance_uuid)


def undo_unshelve(
    sessions: Sessions,
    instance_uuid: str,
    host: str | None,
    exc: BaseException,
    event_id: int | None = None,
    record_event: Callable[[Session], None] | None = None,
) -> bool:
    """Nova's failed ``_unshelve_instance``: allocations (and devices) released,
    host/node nulled, task None, a fault; the instance stays SHELVED_OFFLOADED.
    Idempotent: False once the instance has left the unshelve."""

    def work(session: Session) -> bool:
        try:
            instance = locked(session, instance_uuid)
        except InstanceNotFound:
            return False
        if instance.deleted or instance.task_state not in UNSHELVE.tasks:
            return False
        if instance.vm_state == VmState.SHELVED_OFFLOADED:
            release(session, instance_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=UNSHELVE.tasks,
                task_state=None,
                host=None,
                node=None,
            )
        elif instance.vm_state == VmState.SHELVED:  # never got to its start step
            cas_update(session, instance_uuid, expected_task_state=UNSHELVE.tasks, task_state=None)
        else:
            return False
        actions.add_fault(session, instance_uuid, exc, host)
        if event_id is not None:
            result, tb, details = actions.outcome(exc)
            actions.finish_event(session, event_id, result, tb, details, finish_action=True)
        elif record_event is not None:
            record_event(session)
        return True

    return retry_on_conflict(sessions, work)


def fail_unshelve(
    sessions: Sessions,
    instance_uuid: str,
    request_id: str,
    host: str | None,
    exc: BaseException,
    event: str,
) -> bool:
    """The undo of an unshelve that failed outside the host step (no valid host, a
    lost or misrouted message), recording ``event`` as an Error."""
    return undo_unshelve(
        sessions,
        instance_uuid,
        host,
        exc,
        record_event=lambda session: actions.record_event(
            session, instance_uuid, request_id, event, host, exc
        ),
    )
