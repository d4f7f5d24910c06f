"""What each node *should* account: the consumers that may hold allocations on it and how
much, by Nova's rules. Heal and audit both start from this one answer.

- an instance on the node (``host``/``node``), not deleted, not offloaded (unless being
  unshelved onto the node), with no move in flight, holds its flavor under its own uuid;
- a move in flight (migration not in a terminal status) holds the source node under the
  migration's uuid (old flavor) and the destination under the instance's uuid (new
  flavor); a same-host resize holds both on one node, as placement does;
- an evacuation that is ``done`` still holds its source under the migration's uuid until
  the source's start-up recovery destroys the guest left there (Nova keeps the source
  allocation until then, so a host that comes back is never overcommitted).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, Text, cast, or_, select
from sqlalchemy.orm import Session

from compute.claims import ResourceRequest
from compute.pci import PciRequest
from models import ComputeNode, Instance, Migration
from models.flavor import FlavorSnapshot
from models.migration import MigrationType
from models.states import TERMINAL_MIGRATION_STATUSES, MigrationStatus

TERMINAL_MIGRATION = tuple(sorted(TERMINAL_MIGRATION_STATUSES))
NOT_COUNTED_VM_STATES = ("deleted", "shelved_offloaded")
UNSHELVE_TASK_STATES = ("unshelving", "spawning")


class Expected(NamedTuple):
    """A consumer the node should account, and what for. A tuple: a node has thousands."""

    consumer_uuid: str
    instance_uuid: str
    kind: str  # "instance", "migration-source", "migration-dest"
    request: ResourceRequest

    @property
    def resources(self) -> dict[str, int]:
        return {rc: n for rc, n in self.request.as_resources().items() if n}


def flavor_request(
    flavor: FlavorSnapshot, pci: Iterable[Mapping[str, Any]] | None = None
) -> ResourceRequest:
    return ResourceRequest.from_flavor(flavor, [PciRequest.from_dict(p) for p in pci or ()])


#: A node's host or hypervisor hostname in a condition: its value, or a bound parameter
#: (a statement built once for every node, ``compute.resource_tracker``).
Name = str | ColumnElement[str]


def _on_source(host: Name, nodename: Name) -> ColumnElement[bool]:
    return (Migration.source_compute == host) & (Migration.source_node == nodename)


def _in_progress(host: Name, nodename: Name) -> ColumnElement[bool]:
    on_dest = (Migration.dest_compute == host) & (Migration.dest_node == nodename)
    return (
        or_(_on_source(host, nodename), on_dest)
        & Migration.status.not_in(TERMINAL_MIGRATION)
        # Not yet placed: the instance still holds its source as an instance.
        & Migration.dest_node.is_not(None)
    )


def _evacuated_from(host: Name, nodename: Name) -> ColumnElement[bool]:
    return (
        (Migration.migration_type == MigrationType.EVACUATION)
        & (Migration.status == MigrationStatus.DONE)
        & _on_source(host, nodename)
    )


def node_moves(host: Name, nodename: Name) -> ColumnElement[bool]:
    """The migrations that make node ``host``/``nodename`` account something: the moves in
    flight on it, and the evacuations done from it whose source has not cleaned up yet."""
    return or_(_in_progress(host, nodename), _evacuated_from(host, nodename)) & (
        Migration.deleted == 0
    )


def counted_instances(host: Name, nodename: Name) -> tuple[ColumnElement[bool], ...]:
    """The instances of node ``host``/``nodename`` that hold their flavor on it, unless a
    move in flight holds it for them (``node_moves``)."""
    return (
        Instance.host == host,
        Instance.node == nodename,
        Instance.deleted == 0,
        or_(
            Instance.vm_state.not_in(NOT_COUNTED_VM_STATES),
            # Nova's allow_resource_removal: an offloaded instance being unshelved
            # here holds its claim (novaq claims when scheduling, hence unshelving).
            (Instance.vm_state == "shelved_offloaded")
            & Instance.task_state.in_(UNSHELVE_TASK_STATES),
        ),
    )


def node_migrations(session: Session, node: ComputeNode) -> tuple[list[Migration], list[Migration]]:
    """The moves in flight on ``node``, and the evacuations done from it whose source has
    not cleaned up yet, in one statement (a done evacuation is terminal: none is both)."""
    query = (
        select(Migration)
        .where(node_moves(node.host, node.hypervisor_hostname))
        .order_by(Migration.id)
    )
    both = list(session.scalars(query))
    in_progress = [m for m in both if m.status not in TERMINAL_MIGRATION_STATUSES]
    return in_progress, [m for m in both if m.status in TERMINAL_MIGRATION_STATUSES]


def expected_consumers(session: Session, node: ComputeNode) -> dict[str, Expected]:
    expected: dict[str, Expected] = {}
    moving: set[str] = set()
    in_progress, evacuated = node_migrations(session, node)
    for migration in in_progress:
        moving.add(migration.instance_uuid)
        if (migration.source_compute, migration.source_node) == (
            node.host,
            node.hypervisor_hostname,
        ):
            expected[migration.uuid] = Expected(
                migration.uuid,
                migration.instance_uuid,
                "migration-source",
                flavor_request(migration.flavors.old, migration.context.old_pci_requests),
            )
        if (migration.dest_compute, migration.dest_node) == (node.host, node.hypervisor_hostname):
            expected[migration.instance_uuid] = Expected(
                migration.instance_uuid,
                migration.instance_uuid,
                "migration-dest",
                flavor_request(migration.flavors.new, migration.context.new_pci_requests),
            )
    for migration in evacuated:
        expected[migration.uuid] = Expected(
            migration.uuid,
            migration.instance_uuid,
            "migration-source",
            flavor_request(migration.flavors.old, migration.context.old_pci_requests),
        )
    # Columns, not instances: a node's thousand instances would otherwise cost a mapped
    # object and a validated flavor each, where most share a few flavors (the memo below).
    session.flush()  # what the ORM would do before its own query
    instances = (
        session.connection()
        .execute(
            select(
                Instance.uuid,
                cast(Instance.flavor, Text),
                cast(Instance.request_spec["pci_requests"], Text),
            ).where(*counted_instances(node.host, node.hypervisor_hostname))
        )
        .all()
    )  # all at once: SQLAlchemy's row-at-a-time iteration costs twice as much
    for uuid, flavor_json, pci_json in instances:
        if uuid not in moving:
            request = stored_request(flavor_json, pci_json)
            expected[uuid] = Expected(uuid, uuid, "instance", request)
    return expected


@functools.lru_cache(maxsize=256)
def stored_request(flavor_json: str, pci_json: str | None) -> ResourceRequest:
    """The request of a flavor snapshot and PCI requests as stored (JSON text)."""
    pci = json.loads(pci_json) if pci_json else None
    return flavor_request(FlavorSnapshot.load(json.loads(flavor_json)), pci)
