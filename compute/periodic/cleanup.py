"""``_run_pending_deletes`` and ``_cleanup_incomplete_migrations``: remove the instance
files deleted servers left on this host (NOVA_BEHAVIOUR.md §7.2).

A terminate removes the instance directory itself (``compute.delete``), counting the
attempt in system_metadata ``clean_attempts`` and setting ``cleaned`` when the files went
away. ``run_pending_deletes`` retries the deleted instances of this host whose files are
still here (``cleaned`` = 0): a delete whose file removal failed, or a "local delete"
made by the API while this host was down. Each try counts; an instance that reached
``maximum_instance_delete_attempts`` is left alone, as in Nova.

``cleanup_incomplete_migrations`` handles what a failed move leaves on the other end: a
server deleted after a resize or migration went to ``error`` has its files (and in novaq,
maybe its guest) on a host that is no longer ``instance.host``, so neither the delete nor
``run_pending_deletes`` (both keyed on ``instance.host``) looks there. A server deleted
mid-move ends the move in ``error`` (``compute.moves.drop_moves``), and so does one
deleted in VERIFY_RESIZE from another host: the source's originals (``<uuid>_resize``,
which ``delete_instance_files`` removes with ``<uuid>``) are found here on its next
pass. Migrations in ``error`` from or to this host whose instance is deleted and lives
elsewhere: the guest is destroyed if still defined here, the files deleted, the migration
set to ``failed`` (compare-and-swap from ``error``).

Deliberate differences from Nova: a deleted row here is ``deleted != 0`` (a SOFT_DELETED
server keeps ``deleted`` = 0, so "not soft" needs no extra filter); Nova's libvirt driver
has no lingering guest to remove there (``cleanup_lingering_instance_resources`` frees
vPMEMs, and a leftover domain is reaped by ``_cleanup_running_deleted_instances``), novaq
destroys it in the same pass because a destination guest started by ``finish_resize`` is
what a failed move most often leaves; and every error migration of such an instance is
failed in one pass (Nova fails one per instance per pass, the next pass the rest).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from compute.delete import clean_attempts, record_clean_attempt
from compute.heal import release_orphan
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from compute.sessions import Sessions
from models import Instance, Migration, utcnow
from models.migration import status_update
from models.states import MigrationStatus
from virt.driver import ComputeDriver

LOG = logging.getLogger(__name__)


# -- _run_pending_deletes ------------------------------------------------------------------


def run_pending_deletes(ctx: PeriodicContext) -> dict[str, Any]:
    """Retry deleting the files of this host's deleted instances (``cleaned`` = 0)."""
    LOG.debug("Cleaning up deleted instances on %s", ctx.host)
    with ctx.sessions() as session:
        pending = _pending_deletes(session, ctx.host)
    LOG.debug("There are %d instances to clean on %s", len(pending), ctx.host)
    maximum = ctx.settings.maximum_instance_delete_attempts
    result: dict[str, list[str]] = {"cleaned": [], "failed": [], "given_up": []}
    for uuid, attempts in pending:
        LOG.debug("Instance %s has had %d of %d cleanup attempts", uuid, attempts, maximum)
        if attempts >= maximum:
            result["given_up"].append(uuid)
            continue
        deleted = _delete_files(ctx.hypervisor, uuid, ctx.host)
        with ctx.sessions() as session:
            _record_attempt(session, uuid, deleted)
        result["cleaned" if deleted else "failed"].append(uuid)
    return result


def _pending_deletes(session: Session, host: str) -> list[tuple[str, int]]:
    """(uuid, clean attempts so far) of the deleted, not cleaned instances of ``host``."""
    instances = session.scalars(
        select(Instance)
        .where(Instance.host == host, Instance.deleted != 0, Instance.cleaned == 0)
        .order_by(Instance.id)
    )
    return [(instance.uuid, clean_attempts(instance)) for instance in instances]


def _delete_files(driver: ComputeDriver, uuid: str, host: str) -> bool:
    try:
        return driver.delete_instance_files(uuid)
    except Exception:  # noqa: BLE001 - counted as a failed attempt; the others go on
        LOG.exception("Instance %s on %s: deleting its files failed", uuid, host)
        return False


def _record_attempt(session: Session, uuid: str, deleted: bool) -> None:
    instance = get_instance(session, uuid, lock=True)
    record_clean_attempt(instance, deleted)
    instance.updated_at = utcnow()


# -- _cleanup_incomplete_migrations --------------------------------------------------------


def cleanup_incomplete_migrations(ctx: PeriodicContext) -> dict[str, Any]:
    """Clean what failed moves of since-deleted servers left on this host."""
    LOG.debug("Cleaning up deleted instances with incomplete migration on %s", ctx.host)
    by_instance = _incomplete_migrations(ctx.sessions, ctx.host)
    result: dict[str, list[str]] = {"cleaned": [], "files_left": [], "migrations_failed": []}
    for instance_uuid, migrations in sorted(by_instance.items()):
        try:
            _destroy_guest(ctx.hypervisor, instance_uuid, ctx.host)
            release_orphan(ctx.sessions, ctx.host, instance_uuid)  # if a heal counted it
        except Exception:  # noqa: BLE001 - left in error, the next pass tries again
            LOG.exception("Instance %s on %s: could not destroy its guest", instance_uuid, ctx.host)
            continue
        # NOTE: as Nova, the migration is failed even if the files would not go: one
        # attempt per failed move. They are reported as ``files_left``; nothing retries
        # them here (``_run_pending_deletes`` looks at ``instance.host`` only).
        gone = _delete_files(ctx.hypervisor, instance_uuid, ctx.host)
        result["cleaned" if gone else "files_left"].append(instance_uuid)
        result["migrations_failed"] += [
            m for m in migrations if _fail_migration(ctx.sessions, m, ctx.host)
        ]
    return result


def _incomplete_migrations(sessions: Sessions, host: str) -> dict[str, list[str]]:
    """Migration uuids in ``error`` from or to ``host``, by instance, for instances that are
    deleted and whose ``host`` is not this one (None counts as another host, as in Nova)."""
    with sessions() as session:
        rows = session.execute(
            select(Migration.instance_uuid, Migration.uuid)
            .join(Instance, Instance.uuid == Migration.instance_uuid)
            .where(
                Migration.status == MigrationStatus.ERROR,
                Migration.deleted == 0,
                or_(Migration.source_compute == host, Migration.dest_compute == host),
                Instance.deleted != 0,
                or_(Instance.host.is_(None), Instance.host != host),
            )
            .order_by(Migration.id)
        ).all()
    by_instance: dict[str, list[str]] = defaultdict(list)
    for instance_uuid, migration_uuid in rows:
        by_instance[instance_uuid].append(migration_uuid)
    return dict(by_instance)


def _destroy_guest(driver: ComputeDriver, instance_uuid: str, host: str) -> None:
    if driver.instance_exists(instance_uuid):
        LOG.info(
            "Instance %s on %s: destroying the guest left by a failed move", instance_uuid, host
        )
        driver.destroy(instance_uuid)


def _fail_migration(sessions: Sessions, migration_uuid: str, host: str) -> bool:
    """``error`` -> ``failed``; False if the migration moved on meanwhile."""
    with sessions() as session:
        changed = session.execute(  # type: ignore[attr-defined]  # a DML result is a CursorResult
            status_update(
                migration_uuid, MigrationStatus.ERROR, MigrationStatus.FAILED, updated_at=utcnow()
            )
        ).rowcount
    if not changed:
        LOG.warning("Migration %s is not found in error any more.", migration_uuid)
        return False
    LOG.info("Migration %s on %s: error -> failed (leftovers cleaned)", migration_uuid, host)
    return True
