"""Moves as Celery canvases: select + claim on ``scheduler``, which replaces itself with
prep_resize (destination) → resize_instance (source) → finish_resize (destination); confirm
is one step on the source; revert is revert_resize (destination) → finish_revert_resize
(source). Every step is routed by its own ``host``; the error callback is on every step."""

from __future__ import annotations

from typing import Any

from celery import chain
from celery.canvas import Signature


def _ids(migration_uuid: str, instance_uuid: str, request_id: str) -> dict[str, Any]:
    return {
        "migration_uuid": migration_uuid,
        "instance_uuid": instance_uuid,
        "request_id": request_id,
    }


def select_workflow(migration_uuid: str, instance_uuid: str, request_id: str) -> Signature:
    from tasks.moves import on_move_error, select_for_move

    workflow = select_for_move.si(**_ids(migration_uuid, instance_uuid, request_id))
    workflow.on_error(on_move_error.s())
    return workflow


def move_chain(
    migration_uuid: str,
    instance_uuid: str,
    request_id: str,
    source: str,
    dest: str,
    alternates: list[list[Any]],
) -> Signature:
    from tasks.moves import finish_resize, on_move_error, prep_resize, resize_instance

    ids = _ids(migration_uuid, instance_uuid, request_id)
    workflow = chain(
        prep_resize.si(**ids, host=dest, alternates=alternates),
        resize_instance.si(**ids, host=source),
        finish_resize.si(**ids, host=dest),
    )
    workflow.on_error(on_move_error.s())
    return workflow


def confirm_workflow(
    migration_uuid: str, instance_uuid: str, request_id: str, source: str
) -> Signature:
    from tasks.moves import confirm_resize, on_move_error

    workflow = confirm_resize.si(**_ids(migration_uuid, instance_uuid, request_id), host=source)
    workflow.on_error(on_move_error.s())
    return workflow


def revert_workflow(
    migration_uuid: str, instance_uuid: str, request_id: str, source: str, dest: str
) -> Signature:
    from tasks.moves import finish_revert_resize, on_move_error, revert_resize

    ids = _ids(migration_uuid, instance_uuid, request_id)
    workflow = chain(
        revert_resize.si(**ids, host=dest), finish_revert_resize.si(**ids, host=source)
    )
    workflow.on_error(on_move_error.s())
    return workflow
