"""Migration records and their accounting, shared by the move steps (``compute.moves``),
their undo (``compute.move_failures``), delete and recovery: lookups, the status sets,
the flavor a move gives or takes back, and the allocations a revert returns.

While a move is in flight the migration holds the source (old flavor and old PCI
devices) and the instance holds the destination (new flavor and new devices).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from compute.claims import ResourceRequest, move_consumer, release
from compute.instance_state import get_instance
from compute.pci import PciRequest
from compute.resource_tracker import get_node
from models import Instance, Migration, utcnow
from models.flavor import FlavorSnapshot
from models.states import MigrationStatus
from models.tables import table_of
from novaq.exceptions import NotFound, ResourcesUnavailable

IN_PROGRESS = (
    MigrationStatus.PRE_MIGRATING,
    MigrationStatus.MIGRATING,
    MigrationStatus.POST_MIGRATING,
    MigrationStatus.FINISHED,
    MigrationStatus.CONFIRMING,
    MigrationStatus.REVERTING,
)


#: A move that reached VERIFY_RESIZE and waits (or is on its way) to be confirmed.
UNCONFIRMED = (MigrationStatus.FINISHED, MigrationStatus.CONFIRMING)


class MigrationNotFound(NotFound):
    msg_fmt = "Migration %(migration)s could not be found."


def get_migration(session: Session, migration_uuid: str) -> Migration:
    migration = session.scalars(select(Migration).where(Migration.uuid == migration_uuid)).first()
    if migration is None:
        raise MigrationNotFound(migration=migration_uuid)
    return migration


def active_migration(session: Session, instance_uuid: str) -> Migration | None:
    return session.scalars(
        select(Migration)
        .where(Migration.instance_uuid == instance_uuid, Migration.status.in_(IN_PROGRESS))
        .order_by(Migration.id.desc())
    ).first()


def pci_requests(data: Iterable[Mapping[str, Any]] | None) -> list[PciRequest]:
    return [PciRequest.from_dict(p) for p in data or ()]


def new_request(migration: Migration) -> ResourceRequest:
    return ResourceRequest.from_flavor(
        migration.flavors.new, pci_requests(migration.context.new_pci_requests)
    )


def node_id(session: Session, host: str | None, node: str | None) -> int:
    row = get_node(session, host or "", node or "")
    if row is None:
        raise ResourcesUnavailable(node=f"{host}/{node}", reason="compute node is gone")
    return row.id


def set_migration(
    session: Session, migration_uuid: str, status: MigrationStatus, **values: Any
) -> Migration:
    migration = get_migration(session, migration_uuid)
    migration.status = status
    migration.updated_at = utcnow()
    for key, value in values.items():
        setattr(migration, key, value)
    return migration


def take_flavor(
    instance: Instance, flavor: FlavorSnapshot, pci: Iterable[Mapping[str, Any]] | None
) -> None:
    instance.flavor = flavor
    instance.vcpus, instance.memory_mb = flavor.vcpus, flavor.memory_mb
    instance.root_gb, instance.ephemeral_gb = flavor.root_gb, flavor.ephemeral_gb
    spec = dict(instance.request_spec or {})
    spec["flavor"] = flavor.dump()
    spec["pci_requests"] = [dict(p) for p in pci or ()]
    instance.request_spec = spec


def give_back_source(session: Session, migration: Migration) -> None:
    """Revert the accounting of a move: the instance's destination claim goes, the
    migration's source allocation (and devices) go back to the instance, and the
    instance takes its old flavor again."""
    instance = get_instance(session, migration.instance_uuid)
    if migration.dest_node is not None:
        dest = node_id(session, migration.dest_compute, migration.dest_node)
        release(session, instance.uuid, dest)
    source = node_id(session, migration.source_compute, migration.source_node)
    move_consumer(session, migration.uuid, instance.uuid, source)
    take_flavor(instance, migration.flavors.old, migration.context.old_pci_requests)


def pop_old_vm_state(instance: Instance) -> None:
    instance.old_vm_state = None


#: The ids of an instance's unfinished moves (``drop_moves``), built once: the ORM's
#: load of the (almost always no) migrations cost a delete about 1 ms. On the table: no
#: ORM execution (nor its listeners) for a statement that loads no object.
_MIGRATIONS = table_of(Migration)
_MOVING = (
    select(_MIGRATIONS.c.id)
    .where(
        _MIGRATIONS.c.instance_uuid == bindparam("uuid"),
        _MIGRATIONS.c.status.in_(IN_PROGRESS),
    )
    .order_by(_MIGRATIONS.c.id)
)


def drop_moves(session: Session, instance_uuid: str) -> None:
    """A deleted server ends its moves: what their migrations hold is released.

    A move waiting to be confirmed is ``confirmed`` when both ends are this host (the
    terminate here removes ``<uuid>_resize`` with the rest); otherwise its originals still
    lie on the source, so it goes to ``error`` like every other unfinished move, and
    ``_cleanup_incomplete_migrations`` on the host the server left removes them on its
    next pass (Nova's path for a server deleted mid-move; ``_poll_unconfirmed_resizes``
    errors the migration of a deleted server, the cleanup then fails it).

    NOTE: Nova's API instead confirms on the source before deleting
    (``_confirm_resize_on_deleting``). novaq does not put the source in the delete's path:
    a delete must never wait on another host's worker (a dead source whose message sits
    unacked until the visibility timeout would leave the server in ``deleting``); the
    source's periodic pass is the durable cleanup.
    """
    moving = session.execute(_MOVING, {"uuid": instance_uuid}).scalars().all()
    if not moving:
        return  # every delete of a server that is not moving: one plain SELECT, no ORM load
    for migration in session.scalars(select(Migration).where(Migration.id.in_(moving))):
        release(session, migration.uuid)
        same_host = migration.source_compute == migration.dest_compute
        confirmed = migration.status in UNCONFIRMED and same_host
        migration.status = MigrationStatus.CONFIRMED if confirmed else MigrationStatus.ERROR
        migration.updated_at = utcnow()
