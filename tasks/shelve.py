"""Tasks of the shelve family: the host steps (thin wrappers over ``compute/shelve.py``),
the scheduler step of an unshelve (Nova's conductor ``unshelve_instance``) and the
errback that undoes whichever of them failed before its own handling ran."""

from __future__ import annotations

from typing import Any

from celery.utils.log import get_task_logger

from compute import instance_actions as actions
from compute import shelve
from compute.instance_state import cas_update, get_instance
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from novaq.celery_app import app
from novaq.exceptions import InstanceNotFound, NoValidHost, UnexpectedTaskStateError
from scheduler.unshelve import select_for_unshelve as select_host
from tasks import context
from tasks.errbacks import abort_operation
from tasks.lifecycle import host_task
from workflows.lifecycle import lifecycle_step
from workflows.shelve import unshelve_step

LOG = get_task_logger(__name__)

#: Nova's conductor wraps the scheduling of an unshelve in this event.
SCHEDULE_EVENT = "schedule_instances"


shelve_instance = host_task("shelve", lambda s: {"offload": s.shelved_offload_time == 0})
offload = host_task("shelve_offload")
unshelve_instance = host_task("unshelve")


@app.task(bind=True, name="scheduler.select_for_unshelve")
def select_for_unshelve(self: Any, instance_uuid: str, request_id: str) -> Any:
    """SHELVED: task ``powering-on`` and ``start_instance`` on its host. SHELVED_OFFLOADED:
    select and claim a host (no alternates), then ``unshelve_instance`` there."""
    sessions = context.sessions()
    try:
        with sessions() as session:
            instance = get_instance(session, instance_uuid, with_deleted=False)
            vm_state, host = instance.vm_state, instance.host
            if vm_state == VmState.SHELVED and host is not None:
                cas_update(
                    session,
                    instance_uuid,
                    expected_task_state=[TaskState.UNSHELVING],
                    expected_vm_state=[VmState.SHELVED],
                    task_state=TaskState.POWERING_ON,
                )
    except (InstanceNotFound, UnexpectedTaskStateError) as exc:
        LOG.info("Unshelve of %s skipped: %s", instance_uuid, exc)
        return {"instance_uuid": instance_uuid, "outcome": "skipped"}
    if vm_state == VmState.SHELVED and host is not None:
        return self.replace(lifecycle_step("start", instance_uuid, request_id, host))
    with sessions() as session:
        event_id = actions.start_event(session, instance_uuid, request_id, SCHEDULE_EVENT, None)
    try:
        selection = select_host(sessions, context.scheduler(), instance_uuid)
    except NoValidHost as exc:
        # Nova: task None, the instance stays offloaded; novaq also records a fault.
        LOG.warning("Unshelve of %s: %s", instance_uuid, exc)
        if not shelve.undo_unshelve(sessions, instance_uuid, None, exc, event_id):
            _close(sessions, event_id, exc)
        raise
    _close(sessions, event_id, None)
    if selection is None:
        return {"instance_uuid": instance_uuid, "outcome": "skipped"}
    return self.replace(unshelve_step(instance_uuid, request_id, selection.host))


def _close(sessions: Sessions, event_id: int | None, exc: BaseException | None) -> None:
    if event_id is None:
        return
    result, tb, details = actions.outcome(exc)
    with sessions() as session:
        actions.finish_event(session, event_id, result, tb, details, finish_action=exc is not None)


@app.task(name="scheduler.on_shelve_error", count_deliveries=False)
def on_shelve_error(request: Any, exc: BaseException, traceback: Any) -> None:
    """Undo a shelve-family step that failed before its own handling ran (delivery
    limit, wrong host, a lost scheduler step); a no-op when it already compensated."""
    abort_operation("scheduler.on_shelve_error", request, exc)
