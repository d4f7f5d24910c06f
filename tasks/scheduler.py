"""Scheduler-queue tasks: select and claim destinations for every instance of a boot
request, then hand each build to its host's queue: the task replaces itself
(``Task.replace``) with the first build and sends the others."""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature
from celery.utils.log import get_task_logger
from sqlalchemy.orm import Session

from compute.build import SCHEDULE_EVENT, fail_build
from compute.delivery_ledger import riding
from novaq.celery_app import app
from novaq.exceptions import NoValidHost
from scheduler.request_spec import RequestSpec, Selection
from tasks import context
from workflows import dispatch
from workflows.build import build_step

LOG = get_task_logger(__name__)


# The delivery's start rides the scheduler's first transaction; its end, the hand-over to
# the build, rides the claim of a request's one instance (``tasks.base.NovaqTask.
# handing_over``), or is ``Task.replace``'s (``on_replace``): a multi-create sends its
# other builds first, each writing its own record, before its first build takes the rest.
@app.task(bind=True, name="scheduler.select_destinations", delivery_rides=True)
def select_destinations(
    self: Any, request_id: str, instance_uuids: list[str], request_spec: dict[str, Any]
) -> Any:
    specs = [RequestSpec.from_dict({**request_spec, "instance_uuid": u}) for u in instance_uuids]
    max_attempts = context.settings().scheduler.max_attempts
    handed: dict[str, Signature] = {}

    def placed(session: Session, selections: list[Selection]) -> None:
        if len(selections) == 1:
            build = build_step(request_id, selections[0], max_attempts)
            if self.handing_over(session, build):
                handed[str(selections[0].instance_uuid)] = build

    try:
        selections = context.scheduler().schedule(riding(context.sessions()), specs, placed)
    except NoValidHost as exc:
        # Every read of a decision is read-only now: the start rides the first write,
        # the build's failure, so the step's record starts from the state before it.
        for uuid in instance_uuids:
            fail_build(
                riding(context.sessions()), uuid, request_id, exc, host=None, event=SCHEDULE_EVENT
            )
        raise
    builds = [
        handed.get(str(s.instance_uuid)) or build_step(request_id, s, max_attempts)
        for s in selections
    ]
    if not builds:
        return {"instance_uuids": instance_uuids, "outcome": "skipped"}
    for build in builds[1:]:
        dispatch.send(build)
    return self.replace(builds[0])
