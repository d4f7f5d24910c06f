"""The public API for the life of a server: stop, start, reboot, pause, suspend, rescue,
lock and their reverses, each refused in a state Nova refuses it.

A request is checked in this order, before anything is written or enqueued: the server
(a uuid, or the name of exactly one live server: ``common.check_uuid``), the instance
(not deleted), the gate (``workflows/gate.py``: lock, vm_state, task_state,
``launched_at``), the host (set, and its compute service up: Nova's
``check_instance_host(check_is_up=True)``), the broker. Then one transaction sets the
API's task_state by compare-and-swap (Nova's ``instance.save(expected_task_state=[None])``)
and starts the action; only after the commit is the step sent to ``compute.<host>``.

lock and unlock never leave the API: they write ``locked`` / ``locked_reason`` in
``system_metadata`` and record the action with its ``api_lock`` / ``api_unlock`` event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery.canvas import Signature
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.images import find_image
from compute.instance_state import cas_update, get_instance
from compute.operations import operation
from compute.states import TaskState, VmState
from models import ImageStatus, Instance
from models.db import session_scope
from novaq.exceptions import (
    ImageNotActive,
    InvalidInput,
    UnexpectedTaskStateError,
)
from workflows import dispatch, gate
from workflows.api import common, submit, views
from workflows.api.submit import Written
from workflows.api.validation import Name, validated
from workflows.delete import soft_delete_step
from workflows.lifecycle import lifecycle_step
from workflows.shelve import shelve_step, unshelve_workflow

MAX_REASON_LENGTH = 255


@validated()
def stop(uuid: str) -> str:
    """Power a server off (ACTIVE or ERROR → SHUTOFF). Returns the request id."""
    return _request(uuid, "stop")


@validated()
def force_stop(uuid: str) -> str:
    """Nova's ``force_stop``: power a server off whatever its vm_state or lock (the
    power-state sync uses it for a STOPPED or PAUSED server whose guest disagrees). Only
    Nova's host check and its ``expected_task_state=[None]`` remain. Records a ``stop``
    action, as Nova does."""
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url(), read_only=True) as session:
        host = _up_host(session, get_instance(session, uuid, with_deleted=False), "force_stop")
    dispatch.check_broker()
    request_id = common.new_request_id()
    with session_scope(common.db_url()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        written = Written(
            request_id, (uuid,), TaskState.POWERING_OFF, submit.columns(instance, "task_state")
        )
        try:
            cas_update(session, uuid, expected_task_state=[None], task_state=TaskState.POWERING_OFF)
        except UnexpectedTaskStateError:
            raise gate.InstanceInvalidState(
                action="force_stop",
                uuid=uuid,
                vm_state=instance.vm_state,
                task_state=instance.task_state,
            ) from None
        actions.start_action(session, uuid, "stop", request_id)
    # NOTE: Nova's force_stop is unclean: the guest is destroyed, not asked.
    submit.publish(lifecycle_step("stop", uuid, request_id, host, clean_shutdown=False), written)
    return request_id


@validated()
def start(uuid: str) -> str:
    """Power a stopped server on (SHUTOFF → ACTIVE)."""
    return _request(uuid, "start")


@validated()
def reboot(uuid: str, hard: bool = False) -> str:
    """Reboot: soft from ACTIVE only; hard also from SHUTOFF, PAUSED, SUSPENDED, ERROR and
    while another reboot, a pause, a suspend or a resume is in flight (Nova's
    ``ALLOW_REBOOT``)."""
    if hard:
        return _request(uuid, "reboot_hard", action="reboot", hard=True)
    return _request(uuid, "reboot", hard=False)


@validated()
def pause(uuid: str) -> str:
    return _request(uuid, "pause")


@validated()
def unpause(uuid: str) -> str:
    return _request(uuid, "unpause")


@validated()
def suspend(uuid: str) -> str:
    return _request(uuid, "suspend")


@validated()
def resume(uuid: str) -> str:
    return _request(uuid, "resume")


@validated()
def rescue(uuid: str, rescue_image_ref: str | None = None) -> str:
    """Rescue (ACTIVE, SHUTOFF or ERROR → RESCUE): the guest boots ``rescue_image_ref``
    (an image name or id; by default the server's own image) with its root disk attached
    second; see ``compute/lifecycle.py``. An unknown or inactive image is refused before
    anything is written, as Nova's API refuses it."""
    extra: dict[str, Any] = {}
    if rescue_image_ref is not None:
        with session_scope(common.db_url(), read_only=True) as session:
            image = find_image(session, rescue_image_ref)
            if image.status != ImageStatus.ACTIVE:
                raise ImageNotActive(image_id=image.id)
            extra["rescue_image_ref"] = image.id
    return _request(uuid, "rescue", **extra)


@validated()
def trigger_crash_dump(uuid: str) -> str:
    """Nova's ``trigger_crash_dump`` (API 2.17): an NMI injected into the guest of an
    ACTIVE, PAUSED, RESCUE, VERIFY_RESIZE or ERROR server; no state changes. Returns the
    request id; a hypervisor that refuses it leaves a fault."""
    return _request(uuid, "trigger_crash_dump")


@validated()
def unrescue(uuid: str) -> str:
    return _request(uuid, "unrescue")


@validated()
def shelve(uuid: str) -> str:
    """Shelve (ACTIVE, SHUTOFF, PAUSED or SUSPENDED → SHELVED; with
    ``shelved_offload_time == 0``, Nova's default, on at once to SHELVED_OFFLOADED)."""
    return _request(uuid, "shelve", step=_shelve_step("shelve"))


@validated()
def shelve_offload(uuid: str) -> str:
    """Offload a SHELVED server: its guest destroyed, its resources released, no host."""
    return _request(
        uuid,
        "shelve_offload",
        action="shelveOffload",
        step=_shelve_step("shelve_offload"),
    )


@validated()
def unshelve(uuid: str) -> str:
    """Unshelve: a SHELVED server is started on its host; a SHELVED_OFFLOADED one is
    scheduled again (a host selected and claimed) and spawned there."""
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url(), read_only=True) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        if instance.vm_state == VmState.SHELVED_OFFLOADED:
            gate.check_instance_state(instance, "unshelve")
        else:
            _checked_host(session, instance, "unshelve")
    dispatch.check_broker()
    request_id = common.new_request_id()
    with session_scope(common.db_url()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        gate.check_instance_state(instance, "unshelve")
        written = Written(
            request_id, (uuid,), TaskState.UNSHELVING, submit.columns(instance, "task_state")
        )
        _set_task_state(session, instance, "unshelve", TaskState.UNSHELVING)
        actions.start_action(session, uuid, "unshelve", request_id)
    submit.publish(unshelve_workflow(uuid, request_id), written)
    return request_id


@validated()
def restore(uuid: str) -> str:
    """Restore a SOFT_DELETED server (ACTIVE again). Without a host, Nova sets ACTIVE in
    the API at once."""
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url()) as session:
        instance = common.locked_row(session, uuid)
        if instance.host is None:
            gate.check_instance_state(instance, "restore")
            request_id = common.new_request_id()
            instance.vm_state, instance.deleted_at = VmState.ACTIVE, None
            actions.start_action(session, uuid, "restore", request_id)
            session.flush()
            actions.record_event(session, uuid, request_id, "api_restore", None)
            return request_id
    return _request(
        uuid,
        "restore",
        step=lambda u, r, h: soft_delete_step("restore", u, r, h),
        values={"deleted_at": None},
    )


def _shelve_step(action: str) -> Callable[[str, str, str], Signature]:
    return lambda uuid, request_id, host: shelve_step(action, uuid, request_id, host)


@validated()
def lock(uuid: str, reason: Name | None = None) -> dict[str, Any]:
    """Lock a server: every other operation of the gate is refused until ``unlock``.
    Locking a locked server changes nothing (Nova, for the owner). Returns the server."""
    if reason is not None and len(reason) > MAX_REASON_LENGTH:
        raise InvalidInput(
            reason=f"lock reason must be a string of at most {MAX_REASON_LENGTH} characters"
        )
    return _set_lock(uuid, "lock", reason)


@validated()
def unlock(uuid: str) -> dict[str, Any]:
    """Unlock a server (its lock reason dropped). Returns the server."""
    return _set_lock(uuid, "unlock", None)


# -- helpers -------------------------------------------------------------------------------


def _request(
    uuid: str,
    gate_action: str,
    action: str | None = None,
    step: Callable[[str, str, str], Signature] | None = None,
    values: dict[str, Any] | None = None,
    **extra: Any,
) -> str:
    """The request of the operation table's row ``gate_action``: gate, host, broker; then
    the row's task_state (and ``values``) by compare-and-swap with the instance action
    (``action``, by default the row's name) started; then the host step:
    ``step(uuid, request_id, host)``, by default the row's lifecycle step."""
    task_state = operation(gate_action).task_state
    action = action or gate_action
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url(), read_only=True) as session:
        host = _checked_host(session, get_instance(session, uuid, with_deleted=False), gate_action)
    dispatch.check_broker()
    request_id = common.new_request_id()
    with session_scope(common.db_url()) as session:
        # NOTE: checked again under the write: a concurrent request may have won meanwhile.
        instance = get_instance(session, uuid, with_deleted=False)
        gate.check_instance_state(instance, gate_action)
        written = Written(
            request_id,
            (uuid,),
            task_state,
            submit.columns(instance, "task_state", *(values or {})),
        )
        _set_task_state(session, instance, gate_action, task_state, **(values or {}))
        actions.start_action(session, uuid, action, request_id)
    if step is None:
        signature = lifecycle_step(gate_action, uuid, request_id, host, **extra)
    else:
        signature = step(uuid, request_id, host)
    submit.publish(signature, written)
    return request_id


def _checked_host(session: Session, instance: Instance, gate_action: str) -> str:
    gate.check_instance_state(instance, gate_action)
    return _up_host(session, instance, gate_action)


def _up_host(session: Session, instance: Instance, gate_action: str) -> str:
    """Nova's ``check_instance_host(check_is_up=True)``: the host, which must be up."""
    host = instance.host
    if host is None:
        raise gate.InstanceNotReady(
            uuid=instance.uuid,
            action=gate_action,
            vm_state=instance.vm_state,
            task_state=instance.task_state,
        )
    if not common.host_is_up(session, host, common.settings()):
        raise gate.InstanceHostDown(action=gate_action, uuid=instance.uuid, host=host)
    return host


def _set_task_state(
    session: Session, instance: Instance, gate_action: str, task: str | None, **values: Any
) -> None:
    rule = gate.rule_for(gate_action)
    expected: dict[str, Any] = {}
    tasks = gate.expected_task_states(gate_action)
    if tasks is not None:
        expected["expected_task_state"] = tasks
    if rule.vm_states is not None:
        expected["expected_vm_state"] = sorted(rule.vm_states)
    try:
        cas_update(session, instance.uuid, task_state=task, **values, **expected)
    except UnexpectedTaskStateError:
        raise gate.InstanceInvalidState(
            action=gate_action,
            uuid=instance.uuid,
            vm_state=instance.vm_state,
            task_state=instance.task_state,
        ) from None


def _set_lock(uuid: str, action: str, reason: str | None) -> dict[str, Any]:
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url()) as session:
        instance = common.locked_row(session, uuid)
        gate.check_instance_state(instance, action)
        meta = dict(instance.system_metadata or {})
        if action == "lock" and meta.get("locked"):
            return views.instance_dict(session, instance)
        if action == "lock":
            meta["locked"] = True
            if reason:
                meta["locked_reason"] = reason
        else:
            meta.pop("locked", None)
            meta.pop("locked_reason", None)
        instance.system_metadata = meta
        request_id = common.new_request_id()
        actions.start_action(session, uuid, action, request_id)
        session.flush()
        actions.record_event(session, uuid, request_id, f"api_{action}", None)
        return views.instance_dict(session, instance)


__all__ = [
    "force_stop",
    "lock",
    "pause",
    "reboot",
    "rescue",
    "restore",
    "resume",
    "shelve",
    "shelve_offload",
    "start",
    "stop",
    "suspend",
    "trigger_crash_dump",
    "unlock",
    "unpause",
    "unrescue",
    "unshelve",
]
