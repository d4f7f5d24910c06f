"""Tasks of rebuild and evacuate: thin wrappers over ``compute/rebuild.py`` and
``scheduler/evacuate.py``; the scheduler step of an evacuation replaces itself with the
host step on the destination it claimed."""

from __future__ import annotations

from typing import Any

from celery.utils.log import get_task_logger

from compute import notifications, rebuild
from novaq.celery_app import app
from novaq.exceptions import NoValidHost
from scheduler.evacuate import EvacuationScheduler
from scheduler.rebuild import check_rebuild as rebuild_check
from tasks import context
from tasks.compute import check_host
from workflows.rebuild import evacuate_step, rebuild_workflow

LOG = get_task_logger(__name__)


@app.task(bind=True, name="scheduler.check_rebuild")
def check_rebuild(self: Any, instance_uuid: str, request_id: str, orig_image_ref: str) -> Any:
    """Nova's conductor for a rebuild with a new image: the image filters on the
    server's host, then the host step there."""
    sessions = context.sessions()
    try:
        host = rebuild_check(context.scheduler(), sessions, instance_uuid)
    except NoValidHost as exc:
        rebuild.fail_rebuild_scheduling(sessions, instance_uuid, request_id, exc, orig_image_ref)
        raise
    notifications.emit(sessions, "instance.rebuild_scheduled", instance_uuid, None, request_id)
    return self.replace(rebuild_workflow(instance_uuid, request_id, host))


@app.task(bind=True, name="scheduler.select_for_evacuation")
def select_for_evacuation(
    self: Any, migration_uuid: str, instance_uuid: str, request_id: str
) -> Any:
    sessions = context.sessions()
    notifications.emit(sessions, "instance.evacuate", instance_uuid, None, request_id)
    try:
        selection = EvacuationScheduler(context.scheduler()).select(sessions, migration_uuid)
    except NoValidHost as exc:
        # Nova's conductor: the migration in error, the server in ERROR with the fault.
        rebuild.abort_evacuation(sessions, migration_uuid, exc, None, rebuild.SCHEDULE_EVENT)
        raise
    notifications.emit(sessions, "instance.rebuild_scheduled", instance_uuid, None, request_id)
    return self.replace(evacuate_step(migration_uuid, instance_uuid, request_id, selection.host))


@app.task(name="compute.rebuild_instance")
def rebuild_instance(
    instance_uuid: str, request_id: str, host: str, migration_uuid: str | None = None
) -> dict[str, str]:
    """Rebuild here (no migration) or rebuild the evacuated server here (its destination)."""
    check_host(host)
    ctx = context.step_context(request_id, host)
    with notifications.notified(ctx.sessions, "rebuild", instance_uuid, host, request_id):
        if migration_uuid is None:
            outcome = rebuild.rebuild_instance(ctx, instance_uuid)
        else:
            outcome = rebuild.evacuate_instance(ctx, migration_uuid)
    return {"instance_uuid": instance_uuid, "outcome": outcome}


@app.task(name="scheduler.on_rebuild_error", count_deliveries=False)
def on_rebuild_error(request: Any, exc: BaseException, traceback: Any) -> None:
    """Undo a rebuild or an evacuation that failed before its own handling ran (no host,
    delivery limit, wrong host, a step the reaper gave up on); a no-op once undone."""
    kwargs = request.kwargs or {}
    migration_uuid = kwargs.get("migration_uuid")
    LOG.warning("Rebuild of %s failed in %s: %r", kwargs.get("instance_uuid"), request.task, exc)
    if migration_uuid:
        rebuild.abort_evacuation(context.sessions(), migration_uuid, exc, kwargs.get("host"))
    elif kwargs.get("instance_uuid"):
        rebuild.abort_rebuild(
            context.sessions(),
            kwargs["instance_uuid"],
            kwargs.get("request_id", ""),
            kwargs.get("host", ""),
            exc,
        )
