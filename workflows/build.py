"""Build: select + claim on ``scheduler`` for the whole request, which replaces itself
with ``build_and_run_instance`` on ``compute.<host>`` (and sends the builds of the other
instances of a multi-create). A failed spawn is rescheduled by the compute step itself to
the next alternate's queue. The error callback is the fast path of compensation
(ERROR + fault + release); it moves with the replacement."""

from __future__ import annotations

from celery.canvas import Signature

from scheduler.request_spec import RequestSpec, Selection
from workflows.canvas import errback, step

ON_ERROR = "scheduler.on_build_error"


def build_workflow(request_id: str, specs: list[RequestSpec]) -> Signature:
    shared = specs[0].to_dict()
    workflow = step(
        "scheduler.select_destinations",
        request_id=request_id,
        instance_uuids=[s.instance_uuid for s in specs],
        request_spec=shared,
    )
    workflow.on_error(errback(ON_ERROR))
    return workflow


def build_step(
    request_id: str, selection: Selection, max_attempts: int, attempt: int = 1
) -> Signature:
    """The build of one placed instance on its host, with its alternates."""
    build = step(
        "compute.build_and_run_instance",
        instance_uuid=selection.instance_uuid,
        request_id=request_id,
        host=selection.host,
        node=selection.nodename,
        attempt=attempt,
        max_attempts=max_attempts,
        alternates=[list(a) for a in selection.alternates],
    )
    build.on_error(errback(ON_ERROR))
    return build
