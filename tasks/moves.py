"""Tasks of moves (resize, cold migrate, confirm, revert): thin wrappers over
``compute/moves.py``; the scheduler step replaces itself with the host-bound chain."""

from __future__ import annotations

import dataclasses
from typing import Any

from celery.utils.log import get_task_logger

from compute import moves, notifications
from models.alternate import dump_alternates, load_alternates
from novaq.celery_app import app
from novaq.exceptions import NoValidHost
from scheduler.groups import load_instance_group
from scheduler.manager import MoveScheduler
from scheduler.request_spec import RequestSpec
from tasks import context
from tasks.compute import check_host
from workflows.moves import move_chain

LOG = get_task_logger(__name__)


def _ctx(migration_uuid: str, request_id: str, host: str) -> moves.MoveContext:
    check_host(host)
    return moves.MoveContext(
        context.sessions(),
        context.driver(),
        host,
        request_id,
        context.settings().shutdown_timeout,
        migration_uuid=migration_uuid,
    )


def move_spec(migration_uuid: str) -> tuple[RequestSpec, str]:
    """The request of a move, built from the migration and the instance's boot request."""
    s = context.settings()
    with context.sessions()() as session:
        migration = moves.get_migration(session, migration_uuid)
        base = RequestSpec.from_dict(dict(migration.context.request_spec))
        resize = migration.migration_type == "resize"
        same_host_ok = resize and s.allow_resize_to_same_host
        spec = dataclasses.replace(
            base,
            flavor=migration.flavors.new,
            pci_requests=tuple(moves.pci_requests(migration.context.new_pci_requests)),
            ignore_hosts=() if same_host_ok else (migration.source_compute or "",),
            requested_host=migration.context.requested_host,
            force_hosts=(),
            instance_group=load_instance_group(session, base.group) if base.group else None,
        )
        return spec, migration.source_compute or ""


@app.task(bind=True, name="scheduler.select_for_move")
def select_for_move(self: Any, migration_uuid: str, instance_uuid: str, request_id: str) -> Any:
    spec, source = move_spec(migration_uuid)
    try:
        selection = MoveScheduler(context.scheduler()).select(
            context.sessions(), spec, migration_uuid
        )
    except NoValidHost as exc:
        moves.fail_scheduling(context.sessions(), migration_uuid, exc)
        raise
    alternates = dump_alternates(selection.alternates)
    return self.replace(
        move_chain(migration_uuid, instance_uuid, request_id, source, selection.host, alternates)
    )


@app.task(bind=True, name="compute.prep_resize")
def prep_resize(
    self: Any,
    migration_uuid: str,
    instance_uuid: str,
    request_id: str,
    host: str,
    alternates: list[list[Any]] | None = None,
) -> Any:
    ctx = _ctx(migration_uuid, request_id, host)
    try:
        with notifications.notified(ctx.sessions, "resize_prep", instance_uuid, host, request_id):
            moves.prep_resize(ctx)
    except Exception as exc:
        tries = load_alternates(alternates)
        moved = moves.reschedule_move(context.sessions(), migration_uuid, tries, exc, host)
        if moved is None:
            raise
        (next_host, _, _), remaining = moved
        LOG.warning(
            "prep_resize of %s failed on %s, rescheduled to %s", instance_uuid, host, next_host
        )
        self.request.chain = None  # the rest of this chain was bound to the old destination
        with context.sessions()() as session:
            source = moves.get_migration(session, migration_uuid).source_compute or ""
        return self.replace(
            move_chain(
                migration_uuid,
                instance_uuid,
                request_id,
                source,
                next_host,
                dump_alternates(remaining),
            )
        )
    return {"instance_uuid": instance_uuid, "step": "prep_resize", "host": host}


def _step(name: str, run: Any, event: str) -> Any:
    @app.task(name=f"compute.{name}")
    def task(migration_uuid: str, instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
        ctx = _ctx(migration_uuid, request_id, host)
        with notifications.notified(ctx.sessions, event, instance_uuid, host, request_id):
            run(ctx)
        return {"instance_uuid": instance_uuid, "step": name, "host": host}

    task.__doc__ = run.__doc__
    return task


# Versioned notification names, as Nova's (NOVA_BEHAVIOUR.md §10).
resize_instance = _step("resize_instance", moves.resize_instance, "resize")
finish_resize = _step("finish_resize", moves.finish_resize, "resize_finish")
confirm_resize = _step("confirm_resize", moves.confirm_resize, "resize_confirm")
revert_resize = _step("revert_resize", moves.revert_resize, "resize_revert")
finish_revert_resize = _step("finish_revert_resize", moves.finish_revert_resize, "resize_revert")


@app.task(name="scheduler.on_move_error", count_deliveries=False)
def on_move_error(request: Any, exc: BaseException, traceback: Any) -> None:
    kwargs = request.kwargs or {}
    migration_uuid = kwargs.get("migration_uuid")
    if migration_uuid:
        LOG.warning("Move %s failed in %s: %r", migration_uuid, request.task, exc)
        moves.abort_move(context.sessions(), migration_uuid, exc, kwargs.get("host"))
