"""Delete: ``terminate_instance`` on the instance's host, first confirming a resize on its
source when the server is in VERIFY_RESIZE; soft delete and restore: one step each on the
instance's host, with the errback that undoes them."""

from __future__ import annotations

from celery import chain
from celery.canvas import Signature


def delete_workflow(
    instance_uuid: str, request_id: str, host: str, confirm_first: tuple[str, str] | None = None
) -> Signature:
    """``confirm_first``: (migration, source host) of a resize to confirm on its source
    before the terminate (Nova's ``_confirm_resize_on_deleting``). A confirm that fails
    does not stop the delete: its errback sends the terminate, and the source's
    ``_cleanup_incomplete_migrations`` removes what the confirm left."""
    from tasks.compute import terminate_instance

    terminate = terminate_instance.si(instance_uuid=instance_uuid, request_id=request_id, host=host)
    if confirm_first is None:
        return terminate
    from tasks.moves import confirm_resize_on_deleting, on_confirm_on_deleting_error

    migration_uuid, source = confirm_first
    confirm = confirm_resize_on_deleting.si(
        migration_uuid=migration_uuid,
        instance_uuid=instance_uuid,
        request_id=request_id,
        host=source,
        dest=host,
    )
    confirm.on_error(on_confirm_on_deleting_error.s())
    return chain(confirm, terminate)


def soft_delete_step(action: str, instance_uuid: str, request_id: str, host: str) -> Signature:
    """``action``: "soft_delete" or "restore"."""
    from tasks import soft_delete as soft_delete_tasks

    task = {
        "soft_delete": soft_delete_tasks.soft_delete_instance,
        "restore": soft_delete_tasks.restore_instance,
    }[action]
    step = task.si(instance_uuid=instance_uuid, request_id=request_id, host=host)
    step.on_error(soft_delete_tasks.on_soft_delete_error.s())
    return step
