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
from compute.claims import release_in_session, retry_on_conflict
from compute.instance_state import cas_update
from compute.lifecycle import (
    DONE,
    SHELVED_KEYS,
    SKIPPED,
    Operation,
    _begin,
    _fail,
    _finish,
    _keep_vm_state,
    _locked,
    _superseded,
    guest_power_state,
)
from compute.lifecycle import abort as lifecycle_abort
from compute.pci import held_devices
from compute.power import DEFAULT_SHUTDOWN_TIMEOUT_S, instance_power_off_timeout
from compute.states import TaskState, VmState
from models import Instance, utcnow
from models.db import session_scope
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)

SHELVE = Operation(
    "shelve",
    "compute_shelve_instance",
    TaskState.SHELVING,
    (TaskState.SHELVING, TaskState.SHELVING_OFFLOADING),
    _keep_vm_state,
)
SHELVE_OFFLOAD = Operation(
    "shelve_offload",
    "compute_shelve_offload_instance",
    TaskState.SHELVING_OFFLOADING,
    (TaskState.SHELVING_OFFLOADING,),
    _keep_vm_state,
)
UNSHELVE = Operation(
    "unshelve",
    "compute_unshelve_instance",
    TaskState.UNSHELVING,
    (TaskState.UNSHELVING, TaskState.SPAWNING),
    _keep_vm_state,
)
#: By task name suffix (``compute.<key>_instance``), for the errback.
OPERATIONS = {op.name: op for op in (SHELVE, SHELVE_OFFLOAD, UNSHELVE)}


def shelve_instance(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    request_id: str,
    host: str,
    offload: bool = True,
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT_S,
) -> str:
    """``shelving`` → SHELVED, or (``offload``: Nova's ``shelved_offload_time == 0``)
    SHELVED/``shelving_offloading`` → SHELVED_OFFLOADED in the same step."""
    begun = _begin(db_url, instance_uuid, request_id, host, SHELVE, (SHELVE.task,))
    if begun is None:
        return SKIPPED
    try:
        timeout = instance_power_off_timeout(db_url, instance_uuid, shutdown_timeout_s)
        driver.power_off(instance_uuid, timeout)
        power = guest_power_state(driver, instance_uuid)
    except Exception as exc:
        LOG.warning("Instance %s on %s: shelve failed: %s", instance_uuid, host, exc)
        _fail(db_url, instance_uuid, host, SHELVE, begun.event_id, exc, None)
        raise

    def snapshot(instance: Instance) -> dict[str, Any]:
        meta = dict(instance.system_metadata or {})
        meta.update(
            shelved_at=utcnow().isoformat(),
            shelved_image_id=str(uuid_module.uuid4()),
            shelved_host=host,
        )
        return {"vm_state": VmState.SHELVED, "system_metadata": meta, "power_state": power}

    if not offload:
        return _finish(
            db_url, instance_uuid, host, SHELVE, begun.event_id, (SHELVE.task,), snapshot
        )
    try:
        with session_scope(db_url) as session:
            values = snapshot(_locked(session, instance_uuid))
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[SHELVE.task],
                task_state=TaskState.SHELVING_OFFLOADING,
                **values,
            )
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        return _superseded(db_url, instance_uuid, host, SHELVE, begun.event_id, exc)
    return _offload(db_url, driver, instance_uuid, host, SHELVE, begun.event_id, timeout)


def shelve_offload_instance(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    request_id: str,
    host: str,
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT_S,
) -> str:
    """SHELVED/``shelving_offloading`` → SHELVED_OFFLOADED, nothing left on this host."""
    begun = _begin(db_url, instance_uuid, request_id, host, SHELVE_OFFLOAD, (SHELVE_OFFLOAD.task,))
    if begun is None:
        return SKIPPED
    timeout = instance_power_off_timeout(db_url, instance_uuid, shutdown_timeout_s)
    return _offload(db_url, driver, instance_uuid, host, SHELVE_OFFLOAD, begun.event_id, timeout)


def _offload(
    db_url: str,
    driver: ComputeDriver,
    instance_uuid: str,
    host: str,
    op: Operation,
    event_id: int | None,
    timeout_s: int,
) -> str:
    """Nova's ``_shelve_offload_instance``: power off, destroy, then the accounting."""
    try:
        if driver.instance_exists(instance_uuid):  # a guest already gone is offloaded
            driver.power_off(instance_uuid, timeout_s)
            driver.destroy(instance_uuid)
        driver.delete_instance_files(instance_uuid)  # unshelve spawns anew, maybe elsewhere
        power = guest_power_state(driver, instance_uuid)
    except Exception as exc:
        LOG.warning("Instance %s on %s: offload failed: %s", instance_uuid, host, exc)
        _fail(db_url, instance_uuid, host, op, event_id, exc, None)
        raise

    def work(session: Session) -> None:
        _locked(session, instance_uuid)
        cas_update(
            session,
            instance_uuid,
            expected_task_state=[TaskState.SHELVING_OFFLOADING],
            vm_state=VmState.SHELVED_OFFLOADED,
            task_state=None,
            power_state=power,
            host=None,
            node=None,
        )
        release_in_session(session, instance_uuid)
        if event_id is not None:
            actions.finish_event(session, event_id, actions.SUCCESS, finish_action=True)

    try:
        retry_on_conflict(db_url, work)
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        return _superseded(db_url, instance_uuid, host, op, event_id, exc)
    LOG.info("Instance %s offloaded from %s", instance_uuid, host)
    return DONE


def unshelve_instance(
    db_url: str, driver: ComputeDriver, instance_uuid: str, request_id: str, host: str
) -> str:
    """The claimed SHELVED_OFFLOADED instance spawned here: ``unshelving`` →
    ``spawning`` → ACTIVE."""
    begun = _begin(
        db_url,
        instance_uuid,
        request_id,
        host,
        UNSHELVE,
        (UNSHELVE.task,),
        task_state=TaskState.SPAWNING,
    )
    if begun is None:
        return SKIPPED
    try:
        with session_scope(db_url) as session:
            instance = _locked(session, instance_uuid)
            devices = held_devices(session, instance_uuid)
            spec = guest_spec(session, instance, tuple(d.address for d in devices))
        driver.spawn(spec)
        power = guest_power_state(driver, instance_uuid)
    except Exception as exc:
        LOG.warning("Instance %s on %s: unshelve failed: %s", instance_uuid, host, exc)
        destroy_quietly(driver, instance_uuid)
        undo_unshelve(db_url, instance_uuid, host, exc, begun.event_id)
        raise

    def final(instance: Instance) -> dict[str, Any]:
        meta = dict(instance.system_metadata or {})
        return {
            "vm_state": VmState.ACTIVE,
            "power_state": power,
            "system_metadata": {k: v for k, v in meta.items() if k not in SHELVED_KEYS},
        }

    outcome = _finish(
        db_url, instance_uuid, host, UNSHELVE, begun.event_id, (TaskState.SPAWNING,), final
    )
    if outcome != DONE:
        # Deleted (or taken over) while spawning: take the guest back down.
        destroy_deleted_guest(db_url, driver, host, instance_uuid)
    return outcome


def undo_unshelve(
    db_url: str,
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
            instance = _locked(session, instance_uuid)
        except InstanceNotFound:
            return False
        if instance.deleted or instance.task_state not in UNSHELVE.tasks:
            return False
        if instance.vm_state == VmState.SHELVED_OFFLOADED:
            release_in_session(session, instance_uuid)
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

    return retry_on_conflict(db_url, work)


def fail_unshelve(
    db_url: str,
    instance_uuid: str,
    request_id: str,
    host: str | None,
    exc: BaseException,
    event: str,
) -> bool:
    """The undo of an unshelve that failed outside the host step (no valid host, a
    lost or misrouted message), recording ``event`` as an Error."""
    return undo_unshelve(
        db_url,
        instance_uuid,
        host,
        exc,
        record_event=lambda session: actions.record_event(
            session, instance_uuid, request_id, event, host, exc
        ),
    )


def abort(
    db_url: str, instance_uuid: str, request_id: str, host: str, op: Operation, exc: BaseException
) -> bool:
    """Undo a shelve-family step that failed before its own handling ran (delivery
    limit, wrong host): an unshelve is failed as ``fail_unshelve`` fails it, the others as
    every ``Operation`` (``compute.lifecycle.abort``). Idempotent: False when there was
    nothing left to undo."""
    if op is UNSHELVE:
        return fail_unshelve(db_url, instance_uuid, request_id, host, exc, op.event)
    return lifecycle_abort(db_url, instance_uuid, request_id, host, op, exc)
