"""Delete: one step, ``terminate_instance`` on the instance's host."""

from __future__ import annotations

from celery.canvas import Signature


def delete_workflow(instance_uuid: str, request_id: str, host: str) -> Signature:
    from tasks.compute import terminate_instance

    return terminate_instance.si(instance_uuid=instance_uuid, request_id=request_id, host=host)
