"""Start-up recovery of a host its servers were evacuated from (Nova's
``_destroy_evacuated_instances``, run before any other recovery).

While the host was down, some of its servers were evacuated (rebuilt on another host).
Their guests may still be defined here, and the evacuations still hold this host's
allocations (under the migration's uuid), so that the host is never overcommitted by a
guest it still runs. At start:

- every guest here whose server has an evacuation from this host that is ``accepted``,
  ``pre-migrating`` or ``done`` is destroyed with its files (instance directories are per
  host, never shared: Nova's ``destroy_disks``), so one server is never reported by two
  hosts;
- every evacuation that is ``done`` gives this host's allocation (and PCI devices) back
  and becomes ``completed``. One still ``accepted`` or ``pre-migrating`` is left to its
  own steps, which finish it (``done``: its source allocation is then dropped at this
  host's next start) or undo it (``failed``/``error``: the allocation goes back to the
  server, back on this host in ERROR, which the operator can rebuild or evacuate again).

On the destination's side, a guest a failed evacuation left here (its step died after
spawning, and the undo sent the server back to its source) is destroyed too
(``destroy_failed_evacuation_guests``), unless the server is on this host now.
"""

from __future__ import annotations

import functools
import logging

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.claims import release, retry_on_conflict
from compute.recovery.common import Host
from compute.resource_tracker import get_node
from models import Instance, Migration, utcnow
from models.migration import MigrationType
from models.states import MigrationStatus

LOG = logging.getLogger(__name__)

#: An evacuation whose undo put the server back on its source.
FAILED = (MigrationStatus.ERROR, MigrationStatus.FAILED)
#: The evacuations whose guests must not run here (Nova's filter).
EVACUATED = (MigrationStatus.ACCEPTED, MigrationStatus.PRE_MIGRATING, MigrationStatus.DONE)


def _evacuations(session: Session, host: str) -> list[tuple[str, str, str | None, str]]:
    """(instance, migration, source node, status) of each evacuation from ``host``."""
    rows = session.scalars(
        select(Migration)
        .where(
            Migration.migration_type == MigrationType.EVACUATION,
            Migration.source_compute == host,
            Migration.status.in_(EVACUATED),
        )
        .order_by(Migration.id)
    )
    return [(m.instance_uuid, m.uuid, m.source_node, m.status) for m in rows]


def destroy_evacuated_instances(rc: Host) -> list[str]:
    """Nova's ``_destroy_evacuated_instances``; returns what was done (one line each)."""
    with rc.sessions() as session:
        evacuations = _evacuations(session, rc.host)
    if not evacuations:
        return []
    done: list[str] = []
    evacuated = {uuid for uuid, _, _, _ in evacuations}
    for uuid in rc.driver.list_instance_uuids():
        if uuid not in evacuated:
            continue
        LOG.info(
            "Instance %s: destroying its guest on %s, it has been evacuated from this host",
            uuid,
            rc.host,
        )
        rc.driver.destroy(uuid)
        rc.driver.delete_instance_files(uuid)
        done.append(f"{uuid}: evacuated from {rc.host} -> guest destroyed")
    for uuid, migration_uuid, node, status in evacuations:
        if status != MigrationStatus.DONE:
            continue
        retry_on_conflict(
            rc.sessions,
            functools.partial(_complete, rc=rc, migration_uuid=migration_uuid, node=node),
        )
        done.append(f"{uuid}: evacuation {migration_uuid} completed, allocation on {rc.host} freed")
    return done


def _complete(session: Session, *, rc: Host, migration_uuid: str, node: str | None) -> None:
    migration = session.scalars(
        select(Migration).where(Migration.uuid == migration_uuid).with_for_update()
    ).first()
    if migration is None or migration.status != MigrationStatus.DONE:
        return
    source = get_node(session, rc.host, node or "")
    if source is None:
        LOG.error("Evacuation %s: source node %s/%s not found", migration_uuid, rc.host, node)
    else:
        release(session, migration_uuid, source.id)
    migration.status = MigrationStatus.COMPLETED
    migration.updated_at = utcnow()


def destroy_failed_evacuation_guests(rc: Host) -> list[str]:
    """The destination's side: a guest here of an evacuation to this host that failed
    (its undo, the errback or the reaper while this host was down, put the server back on
    its source) is a leftover of that attempt, destroyed with its files. A server that is
    on this host now (a later move brought it here) keeps its guest."""
    local = set(rc.driver.list_instance_uuids())
    if not local:
        return []
    with rc.sessions() as session:
        failed = set(
            session.scalars(
                select(Migration.instance_uuid).where(
                    Migration.migration_type == MigrationType.EVACUATION,
                    Migration.dest_compute == rc.host,
                    Migration.status.in_(FAILED),
                    Migration.instance_uuid.in_(local),
                )
            )
        )
        here = set(
            session.scalars(
                select(Instance.uuid).where(
                    Instance.uuid.in_(failed), Instance.host == rc.host, Instance.deleted == 0
                )
            )
        )
    done = []
    for uuid in sorted(failed - here):
        LOG.info("Instance %s: destroying the guest a failed evacuation left on %s", uuid, rc.host)
        rc.driver.destroy(uuid)
        rc.driver.delete_instance_files(uuid)
        done.append(f"{uuid}: failed evacuation to {rc.host} -> guest destroyed")
    return done
