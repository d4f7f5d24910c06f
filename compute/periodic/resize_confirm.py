"""Nova's ``_poll_unconfirmed_resizes`` (NOVA_BEHAVIOUR.md §7.2): resizes and cold
migrations left in VERIFY_RESIZE longer than ``resize_confirm_window`` are confirmed
through the public API, as Nova's are (``compute.periodic.passes`` has the rules the
threshold passes share)."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.claims import release, retry_on_conflict
from compute.periodic import PeriodicContext
from compute.periodic.passes import (
    ERRORED,
    FAILED,
    SKIPPED,
    cutoff_for,
    each,
)
from compute.states import TaskState, VmState
from models import Instance, Migration, utcnow
from models.migration import status_update
from models.states import MigrationStatus

LOG = logging.getLogger(__name__)

CONFIRMING = "confirming"


def poll_unconfirmed_resizes(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_poll_unconfirmed_resizes``: the ``finished`` migrations whose destination
    is this host and whose ``updated_at`` is older than ``resize_confirm_window`` are
    confirmed through the API (``api.confirm_resize``: action ``confirmResize``, the
    source step), unless the instance says otherwise:

    - missing or deleted, ERROR, or in any other state than RESIZED with no task: the
      migration goes to ``error`` (for a missing instance, what the migration still holds
      on the source is released too: no server is left to free it; for the others, as
      Nova, the migration keeps it and the server's own cleanup frees it);
    - task ``deleting``/``soft-deleting`` (the delete confirms it) or ``resize_finish``
      (the migration was saved before the instance): skipped.

    A failed confirm (the API refuses, the broker is down) is logged and retried next run.
    """
    window = ctx.settings.resize_confirm_window
    if window <= 0:
        return {CONFIRMING: [], SKIPPED: [], ERRORED: [], FAILED: []}
    with ctx.sessions() as session:
        due = session.execute(
            select(Migration.uuid, Migration.instance_uuid)
            .where(
                Migration.status == MigrationStatus.FINISHED,
                Migration.dest_compute == ctx.host,
                Migration.updated_at < cutoff_for(window),
            )
            .order_by(Migration.id)
        ).all()
    if due:
        LOG.info("Found %d unconfirmed migrations older than %d seconds", len(due), window)
    instance_of = {migration: instance for migration, instance in due}
    return each(
        list(instance_of),
        (CONFIRMING, SKIPPED, ERRORED),
        ctx.host,
        lambda migration: _auto_confirm(ctx, migration, instance_of[migration]),
    )


def _auto_confirm(ctx: PeriodicContext, migration_uuid: str, instance_uuid: str) -> str:
    LOG.info("Automatically confirming migration %s for instance %s", migration_uuid, instance_uuid)
    try:
        verdict = retry_on_conflict(
            ctx.sessions, lambda session: _judge(session, migration_uuid, instance_uuid)
        )
    except Exception as exc:  # noqa: BLE001 - Nova: "Will retry later."
        LOG.info(
            "Error auto-confirming resize of instance %s: %s. Will retry later.",
            instance_uuid,
            exc,
        )
        return FAILED
    if verdict != CONFIRMING:
        return verdict
    return ctx.request(
        "confirm_resize",
        instance_uuid,
        CONFIRMING,
        "Error auto-confirming resize of instance %s. Will retry later.",
        listed=migration_uuid,
    )


def _judge(session: Session, migration_uuid: str, instance_uuid: str) -> str:
    """Nova's checks, in Nova's order; errors the migration out where Nova does."""
    instance = session.scalars(select(Instance).where(Instance.uuid == instance_uuid)).first()
    if instance is None or instance.deleted:
        return _error_migration(
            session, migration_uuid, f"Instance {instance_uuid} not found", free=True
        )
    if instance.vm_state == VmState.ERROR:
        return _error_migration(session, migration_uuid, "In ERROR state")
    if instance.task_state in (TaskState.DELETING, TaskState.SOFT_DELETING):
        LOG.debug("Instance %s being deleted during resize confirmation. Skipping.", instance_uuid)
        return SKIPPED
    if instance.task_state == TaskState.RESIZE_FINISH:
        LOG.debug("Instance %s still resizing during resize confirmation. Skipping.", instance_uuid)
        return SKIPPED
    if instance.vm_state != VmState.RESIZED or instance.task_state is not None:
        reason = f"In states {instance.vm_state}/{instance.task_state}, not RESIZED/None"
        return _error_migration(session, migration_uuid, reason)
    return CONFIRMING


def _error_migration(session: Session, migration_uuid: str, reason: str, free: bool = False) -> str:
    moved = session.execute(
        status_update(
            migration_uuid, MigrationStatus.FINISHED, MigrationStatus.ERROR, updated_at=utcnow()
        ).execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if not moved:
        return SKIPPED  # confirmed or reverted since the query
    if free:
        release(session, migration_uuid)
    LOG.warning("Setting migration %s to error: %s", migration_uuid, reason)
    return ERRORED
