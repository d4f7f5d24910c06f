"""Build: select + claim on ``scheduler``, which replaces itself with
``build_and_run_instance`` on ``compute.<host>``. The error callback is the fast path of
compensation (ERROR + fault + release); it moves with the replacement."""

from __future__ import annotations

from celery.canvas import Signature

from scheduler.request_spec import RequestSpec


def build_workflow(instance_uuid: str, request_id: str, spec: RequestSpec) -> Signature:
    from tasks.errbacks import on_build_error
    from tasks.scheduler import select_destinations

    workflow = select_destinations.si(
        instance_uuid=instance_uuid, request_id=request_id, request_spec=spec.to_dict()
    )
    workflow.on_error(on_build_error.s())
    return workflow
