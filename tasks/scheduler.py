"""Scheduler-queue tasks: select and claim a destination, then hand the rest of the
workflow to the chosen host's queue (``Task.replace``)."""

from __future__ import annotations

from typing import Any

from celery.utils.log import get_task_logger

from compute.build import SCHEDULE_EVENT, fail_build
from novaq.exceptions import InstanceNotFound, NoValidHost, UnexpectedTaskStateError
from scheduler.request_spec import RequestSpec
from tasks import context
from tasks.celery import app

LOG = get_task_logger(__name__)


@app.task(bind=True, name="scheduler.select_destinations")
def select_destinations(
    self: Any, instance_uuid: str, request_id: str, request_spec: dict[str, Any]
) -> Any:
    """Pick and claim a host for one instance, then become its build on that host."""
    from tasks.compute import build_and_run_instance

    spec = RequestSpec.from_dict(request_spec)
    try:
        selection = context.scheduler().select_and_claim(context.db_url(), spec)
    except NoValidHost as exc:
        fail_build(
            context.db_url(), instance_uuid, request_id, exc, host=None, event=SCHEDULE_EVENT
        )
        raise
    except (UnexpectedTaskStateError, InstanceNotFound) as exc:
        LOG.info("Instance %s left scheduling before it was placed: %s", instance_uuid, exc)
        return {"instance_uuid": instance_uuid, "outcome": "skipped"}
    build = build_and_run_instance.si(
        instance_uuid=instance_uuid,
        request_id=request_id,
        host=selection.host,
        node=selection.nodename,
    )
    return self.replace(build)
