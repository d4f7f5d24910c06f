"""The undo of a move: the one undo of a failed move step (``abort_move``, the errback's),
the end of a move no host could take (``fail_scheduling``), and the reschedule of a
failed prep_resize to an alternate (``reschedule_move``)."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.claims import (
    claim,
    claim_first,
    confirm_move,
    release,
    retry_on_conflict,
)
from compute.instance_state import get_instance
from compute.migrations import (
    IN_PROGRESS,
    MigrationNotFound,
    get_migration,
    give_back_source,
    new_request,
    node_id,
    pop_old_vm_state,
    set_migration,
    take_flavor,
)
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from models import Instance, Migration, utcnow
from models.alternate import Alternate
from models.states import MigrationStatus
from novaq.exceptions import ResourcesUnavailable

LOG = logging.getLogger(__name__)

MOVE_TASK_STATES = (
    TaskState.RESIZE_PREP,
    TaskState.RESIZE_MIGRATING,
    TaskState.RESIZE_MIGRATED,
    TaskState.RESIZE_FINISH,
    TaskState.RESIZE_REVERTING,
)


def abort_move(
    sessions: Sessions, migration_uuid: str, exc: BaseException, host: str | None
) -> bool:
    """The one undo of a move that failed: the accounting follows the instance (back to
    the source if it is still there, kept on the destination if the instance already
    moved), the migration goes to ``error``, the instance to ERROR with a fault. A move
    whose accounting already ended (a revert that failed while restarting the guest on
    the source) only errors the instance out. Idempotent: False once nothing is left."""

    def work(session: Session) -> bool:
        try:
            migration = get_migration(session, migration_uuid)
        except MigrationNotFound:
            # A move the API took back after its publish failed (the migration row went
            # with it) although its message still reached the broker: nothing to undo.
            return False
        instance = get_instance(session, migration.instance_uuid)
        in_flight = migration.status in IN_PROGRESS
        if not in_flight and instance.task_state not in MOVE_TASK_STATES:
            # Nothing left to undo (a delete took the server over, a roll-back already
            # ran), but a request still open has ended: it records its end.
            if actions.action_open(session, instance.uuid, migration.request_id or ""):
                actions.finish_action(
                    session, instance.uuid, migration.request_id or "", actions.ERROR
                )
            return False
        if in_flight:
            _settle_accounting(session, migration, instance)
            set_migration(session, migration_uuid, MigrationStatus.ERROR)
        instance.vm_state, instance.task_state = VmState.ERROR, None
        instance.updated_at = utcnow()
        actions.add_fault(session, instance.uuid, exc, host)
        actions.finish_action(session, instance.uuid, migration.request_id or "", actions.ERROR)
        return True

    done = retry_on_conflict(sessions, work)
    if done:
        LOG.warning("Migration %s failed, instance now ERROR: %s", migration_uuid, exc)
    return done


def _settle_accounting(session: Session, migration: Migration, instance: Instance) -> None:
    if instance.host == migration.source_compute and instance.node == migration.source_node:
        give_back_source(session, migration)
    else:
        source = node_id(session, migration.source_compute, migration.source_node)
        confirm_move(session, migration.uuid, source)
        take_flavor(instance, migration.flavors.new, migration.context.new_pci_requests)


def fail_scheduling(sessions: Sessions, migration_uuid: str, exc: BaseException) -> None:
    """No host for the move: the server stays where it was, in the state it was, with the
    fault and a failed event (Nova's conductor rollback); the migration goes to error."""
    with sessions() as session:
        migration = get_migration(session, migration_uuid)
        if migration.status != MigrationStatus.PRE_MIGRATING:
            return
        instance = get_instance(session, migration.instance_uuid)
        if instance.task_state == TaskState.RESIZE_PREP:
            instance.task_state = None
        pop_old_vm_state(instance)
        actions.add_fault(session, instance.uuid, exc, None)
        actions.record_event(
            session,
            instance.uuid,
            migration.request_id or "",
            "conductor_migrate_server",
            None,
            exc,
        )
        set_migration(session, migration_uuid, MigrationStatus.ERROR)


def reschedule_move(
    sessions: Sessions,
    migration_uuid: str,
    alternates: tuple[Alternate, ...],
    exc: BaseException,
    failed_host: str,
) -> tuple[Alternate, tuple[Alternate, ...]] | None:
    """prep_resize failed on the destination: move the destination claim to the first
    alternate that can take it (Nova's reschedule of a resize), with a fault."""

    def work(session: Session, alternate: Alternate) -> None:
        host, node, nid = alternate
        migration = get_migration(session, migration_uuid)
        # Under the instance's row lock, as the delete takes it: a server deleted (or a move
        # ended) meanwhile is not moved on, else its new claim would outlive it.
        instance = get_instance(session, migration.instance_uuid, lock=True)
        if (
            migration.status != MigrationStatus.PRE_MIGRATING
            or instance.deleted
            or instance.task_state != TaskState.RESIZE_PREP
        ):
            raise _MoveEnded(migration.status)
        dest = node_id(session, migration.dest_compute, migration.dest_node)
        release(session, migration.instance_uuid, dest)
        claim(session, nid, migration.instance_uuid, new_request(migration))
        migration.dest_compute, migration.dest_node = host, node
        actions.add_fault(session, migration.instance_uuid, exc, failed_host)

    def refused(alternate: Alternate, claim_error: ResourcesUnavailable) -> None:
        LOG.info(
            "Migration %s: alternate %s cannot take it: %s",
            migration_uuid,
            alternate[0],
            claim_error,
        )

    try:
        fit = claim_first(sessions, alternates, work, lambda alternate: alternate[0], refused)
    except _MoveEnded as ended:
        LOG.info("Migration %s is not rescheduled: %s", migration_uuid, ended)
        return None
    if fit.chosen is None:
        return None
    return fit.chosen, alternates[fit.index + 1 :]


class _MoveEnded(Exception):
    """The move has nothing left to reschedule (its server deleted, the move over)."""
