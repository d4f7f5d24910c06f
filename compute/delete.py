"""Delete: the host-side terminate (Nova's ``terminate_instance``) and the local delete
of an instance that never reached a host.

Both end the same way: no guest, no allocation, the row soft-deleted (vm_state DELETED,
``deleted_at`` set, ``deleted`` = id as Nova's soft delete does). A terminate also
removes the instance's files on the host, as Nova's ``destroy(destroy_disks=True)``
does: the attempt is counted in system_metadata ``clean_attempts`` and ``cleaned`` is
set only when the files are gone; ``_run_pending_deletes`` retries the others.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute import notifications
from compute.claims import release, retry_on_conflict
from compute.instance_row import InstanceRow, write_row
from compute.instance_state import get_instance, write_columns
from compute.moves import drop_moves
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from compute.steps import DONE, Step, StepContext, StepRun, run_step
from models import Instance, utcnow
from models.states import PowerState

LOG = logging.getLogger(__name__)

TERMINATE_EVENT = "compute_terminate_instance"
#: A terminate's outcome once its step is done (what the terminate task returns).
DONE_OUTCOME = "deleted"


def mark_deleted(instance: Instance) -> None:
    for key, value in deleted_values(instance).items():
        setattr(instance, key, value)


def deleted_values(instance: Instance | InstanceRow) -> dict[str, Any]:
    """The columns of the soft-deleted row (Nova's soft delete: ``deleted`` = id)."""
    now = utcnow()
    return {
        "vm_state": VmState.DELETED,
        "task_state": None,
        "power_state": PowerState.NOSTATE,
        "terminated_at": instance.terminated_at or now,
        "deleted_at": now,
        "updated_at": now,
        "deleted": instance.id,
    }


def local_delete(sessions: Sessions, instance_uuid: str, request_id: str) -> None:
    """Delete an instance with no host in one transaction (no guest to destroy)."""

    def work(session: Session) -> None:
        # NOTE: the row lock first: a claim committing meanwhile (the scheduler placing the
        # instance) is then seen by the release below, instead of leaking.
        instance = get_instance(session, instance_uuid, lock=True)
        if instance.deleted:
            return
        release(session, instance_uuid)
        drop_moves(session, instance_uuid)
        mark_deleted(instance)
        actions.finish_action(session, instance_uuid, request_id)

    retry_on_conflict(sessions, work)
    LOG.info("Instance %s deleted locally (no host)", instance_uuid)


def _destroy(ctx: StepContext, run: StepRun) -> bool | None:
    ctx.driver.destroy(run.instance_uuid)
    return ctx.driver.delete_instance_files(run.instance_uuid)


def _deleted(session: Session, row: InstanceRow, run: StepRun) -> None:
    # (the finish has locked the row: ``row``, a light row; ``release_and_mark`` for it)
    values = _release(session, run.instance_uuid, row, run.result)
    if values:
        write_row(session, row, values)
    return None  # the row is written: no compare-and-swap


def _error_out(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """Nova: a failed terminate leaves the instance in ERROR (task cleared) with a fault;
    the event closes ``Error`` (in the same transaction)."""
    with ctx.sessions() as session:
        instance = get_instance(session, run.instance_uuid)
        if not instance.deleted:
            instance.vm_state = VmState.ERROR
            if instance.task_state == TaskState.DELETING:
                instance.task_state = None
            actions.add_fault(session, run.instance_uuid, exc, ctx.host)
        if run.event_id is not None:
            result, tb, details = actions.outcome(exc)
            actions.finish_event(session, run.event_id, result, tb, details, finish_action=True)


#: Whatever the task_state (a delete outranks every other operation), wherever the
#: instance is recorded: only a deleted row makes a terminate ``skipped``.
TERMINATE = Step(
    "terminate",
    TERMINATE_EVENT,
    TaskState.DELETING,
    (TaskState.DELETING,),
    _destroy,
    _deleted,
    any_task=True,
    check_host=False,
    read_power=False,
    undo=_error_out,
    light_row=True,
)


def terminate_instance(
    ctx: StepContext, instance_uuid: str, notification: str | None = None
) -> str:
    """Destroy and undefine the guest, release the allocations, soft-delete the row.
    Idempotent: a redelivered terminate finds the row deleted and returns ``skipped``.

    ``notification``: Nova's ``instance.<notification>.start`` (every delivery), ``.end``
    and ``.error`` (a failure); the first two read in the step's own transactions
    (``run_step``'s ``notices``), ``.end`` of a run that did not finish (skipped,
    superseded) in one of its own, as it was sent after every run."""
    notices = None
    if notification is not None:
        notices = notifications.step_notices(notification, instance_uuid, ctx.host, ctx.request_id)
    try:
        outcome = run_step(ctx, TERMINATE, instance_uuid, notices=notices)
    except Exception:
        _notify(ctx, notification, instance_uuid, "error", "ERROR")
        raise
    if outcome != DONE:
        _notify(ctx, notification, instance_uuid, "end")
        return outcome
    LOG.info("Instance %s deleted on %s", instance_uuid, ctx.host)
    return DONE_OUTCOME


def _notify(
    ctx: StepContext,
    notification: str | None,
    instance_uuid: str,
    phase: str,
    priority: str = "INFO",
) -> None:
    """``instance.<notification>.<phase>`` read in a transaction of its own."""
    if notification is not None:
        event_type = f"instance.{notification}.{phase}"
        notifications.emit(
            ctx.sessions, event_type, instance_uuid, ctx.host, ctx.request_id, priority
        )


def release_and_mark(
    session: Session,
    instance_uuid: str,
    files_deleted: bool | None = None,
    instance: Instance | None = None,
) -> None:
    """Release everything the instance holds and soft-delete it; ``instance``: its row,
    when the caller has locked it already (else it is locked here). The row is written
    by a statement built once and the loaded row set to it (no ORM flush)."""
    if instance is None:
        instance = get_instance(session, instance_uuid, lock=True)
    values = _release(session, instance_uuid, instance, files_deleted)
    if values:
        write_columns(session, instance, values)


def _release(
    session: Session,
    instance_uuid: str,
    instance: Instance | InstanceRow,
    files_deleted: bool | None,
) -> dict[str, Any]:
    """``release_and_mark``'s release, and the columns it then writes on the locked row.
    A light row says whether the instance has a move to drop (read with it)."""
    release(session, instance_uuid)
    if not isinstance(instance, InstanceRow) or instance.moving:
        drop_moves(session, instance_uuid)
    values = {} if instance.deleted else deleted_values(instance)
    if files_deleted is not None:
        values.update(clean_attempt_values(instance, files_deleted))
    return values


def clean_attempts(instance: Instance | InstanceRow) -> int:
    return int((instance.system_metadata or {}).get("clean_attempts", 0))


def record_clean_attempt(instance: Instance, files_deleted: bool) -> None:
    """Nova's libvirt ``cleanup`` after ``delete_instance_files``: count the attempt in
    system_metadata ``clean_attempts`` (``_run_pending_deletes`` stops at
    ``maximum_instance_delete_attempts``) and set ``cleaned`` once the files are gone."""
    for key, value in clean_attempt_values(instance, files_deleted).items():
        setattr(instance, key, value)


def clean_attempt_values(instance: Instance | InstanceRow, files_deleted: bool) -> dict[str, Any]:
    """``record_clean_attempt``'s columns."""
    sysmeta = dict(instance.system_metadata or {})
    sysmeta["clean_attempts"] = str(clean_attempts(instance) + 1)
    values: dict[str, Any] = {"system_metadata": sysmeta}
    if files_deleted:
        values["cleaned"] = 1
    return values
