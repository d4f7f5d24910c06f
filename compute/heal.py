"""Heal a node's accounting: make its allocations and PCI devices equal what its live
instances, moves and orphan domains hold, and record every correction.

Runs in one transaction whose first read is the node's generation and whose last write is
the generation compare-and-swap, so a claim or release that commits meanwhile makes the
heal retry instead of undoing it (Nova bugs 1849165 and 1896463 were such races).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping

from sqlalchemy import bindparam, delete, select
from sqlalchemy.orm import Session

from compute.claims import retry_on_conflict, write_usage
from compute.pci import held_devices, release_devices
from compute.sessions import Sessions
from compute.usage import Expected, expected_consumers
from models import Allocation, ComputeNode, Instance, Migration, PciDevice, ResourceHeal
from models.allocation import MEMORY_MB, VCPU
from models.pci_device import ALLOCATED, CLAIMED
from models.tables import table_of
from virt.driver import GuestUsage

LOG = logging.getLogger(__name__)


#: A guest the hypervisor runs, as the heal needs it (uuid, vCPUs, MiB of memory).
Domain = GuestUsage


def node_allocations(session: Session, node_id: int) -> dict[str, dict[str, int]]:
    """What each consumer holds on the node: ``{consumer: {resource class: used}}``."""
    session.flush()  # what the ORM would do before its own query
    # On the connection, all at once: a node's thousand consumers hold three rows each,
    # and ORM tuples or SQLAlchemy's row-at-a-time iteration cost twice as much.
    query = select(Allocation.consumer_uuid, Allocation.resource_class, Allocation.used)
    rows = session.connection().execute(query.where(Allocation.compute_node_id == node_id))
    usage: dict[str, dict[str, int]] = {}
    for consumer, rc, used in rows.all():
        usage.setdefault(consumer, {})[rc] = used
    return usage


def orphan_domains(
    session: Session, domains: Mapping[str, Domain], expected: Mapping[str, Expected]
) -> dict[str, Domain]:
    """Guests libvirt runs that no live instance or move of this node explains (started
    behind novaq's back, or a deleted server's guest still running)."""
    known = {e.instance_uuid for e in expected.values()}
    candidates = [u for u in domains if u not in known]
    if not candidates:
        return {}
    # A live instance that is elsewhere (mid-move bookkeeping) is not an orphan.
    live_elsewhere = live_among(session, candidates)
    return {u: domains[u] for u in candidates if u not in live_elsewhere}


def live_among(session: Session, uuids: list[str]) -> set[str]:
    """Which of ``uuids`` are live instances, wherever they are (the orphan question of
    the heal and of the audit's steady check: ``compute.steady_usage``)."""
    session.flush()  # the ORM's pending writes first, as an ORM read's autoflush did
    # (on the connection: a Core read, no ORM entity to build)
    return set(session.connection().scalars(_LIVE, {"uuids": uuids}))


_INSTANCES = table_of(Instance).c
_LIVE = select(_INSTANCES.uuid).where(
    _INSTANCES.uuid.in_(bindparam("uuids", expanding=True)), _INSTANCES.deleted == 0
)


class NodeHealer:
    """One heal pass over one node inside the caller's transaction."""

    def __init__(
        self,
        session: Session,
        node: ComputeNode,
        domains: Mapping[str, Domain],
        guest_exists: Callable[[str], bool] | None = None,
    ):
        self.session, self.node, self.domains = session, node, domains
        self.guest_exists = guest_exists
        self.heals: list[ResourceHeal] = []

    def run(self) -> list[ResourceHeal]:
        generation = self.node.generation  # read first: see the module docstring
        expected = expected_consumers(self.session, self.node)
        orphans = orphan_domains(self.session, self.domains, expected)
        if self.guest_exists is not None:
            # ``domains`` was read before this transaction: a delete may have destroyed
            # the guest and committed since. A delete destroys before it commits, so a
            # guest still there after the read that found its server gone is a real
            # orphan; one gone is not counted (it would stay counted until the next pass).
            orphans = {u: d for u, d in orphans.items() if self.guest_exists(u)}
        wanted = {c: e.resources for c, e in expected.items()}
        wanted.update({u: {VCPU: d.vcpus, MEMORY_MB: d.memory_mb} for u, d in orphans.items()})
        actual = node_allocations(self.session, self.node.id)
        for consumer in actual.keys() - wanted.keys():
            self._remove(consumer, actual[consumer])
        for consumer, resources in wanted.items():
            if actual.get(consumer) != resources:
                action = (
                    "orphan_counted"
                    if consumer in orphans
                    else ("corrected" if consumer in actual else "recreated")
                )
                self._set(consumer, resources, action, actual.get(consumer))
        self._free_stray_devices(expected)
        self.session.flush()
        write_usage(self.session, self.node, generation)
        return self.heals

    def _record(self, consumer: str | None, action: str, resources: object, reason: str) -> None:
        heal = ResourceHeal(
            host=self.node.host,
            node=self.node.hypervisor_hostname,
            consumer_uuid=consumer,
            action=action,
            resources=json.dumps(resources, sort_keys=True),
            reason=reason,
        )
        self.session.add(heal)
        self.heals.append(heal)
        LOG.warning(
            "Healed %s/%s: %s %s %s (%s)",
            self.node.host,
            self.node.hypervisor_hostname,
            action,
            consumer,
            heal.resources,
            reason,
        )

    def release_orphan(self, consumer: str) -> list[ResourceHeal]:
        """Remove ``consumer``'s allocations from this node unless the node expects it."""
        generation = self.node.generation
        held = node_allocations(self.session, self.node.id).get(consumer)
        if not held or consumer in expected_consumers(self.session, self.node):
            return []
        self._remove(consumer, held)
        self.session.flush()
        write_usage(self.session, self.node, generation)
        return self.heals

    def _remove(self, consumer: str, resources: dict[str, int]) -> None:
        self.session.execute(
            delete(Allocation).where(
                Allocation.compute_node_id == self.node.id, Allocation.consumer_uuid == consumer
            )
        )
        release_devices(self.session, consumer, self.node.id)
        self._record(consumer, "removed", resources, self._why_not_live(consumer))

    def _set(
        self, consumer: str, resources: dict[str, int], action: str, before: dict[str, int] | None
    ) -> None:
        self.session.execute(
            delete(Allocation).where(
                Allocation.compute_node_id == self.node.id, Allocation.consumer_uuid == consumer
            )
        )
        for rc, used in resources.items():
            self.session.add(
                Allocation(
                    compute_node_id=self.node.id,
                    consumer_uuid=consumer,
                    resource_class=rc,
                    used=used,
                )
            )
        reason = {
            "orphan_counted": "a guest the database does not know runs on this node",
            "recreated": "a live consumer of this node had no allocation",
            "corrected": f"allocation was {before}",
        }[action]
        self._record(consumer, action, resources, reason)

    def _free_stray_devices(self, expected: Mapping[str, Expected]) -> None:
        rows = self.session.scalars(
            select(PciDevice).where(
                PciDevice.compute_node_id == self.node.id,
                PciDevice.status.in_((CLAIMED, ALLOCATED)),
                PciDevice.deleted == 0,
            )
        )
        for consumer in {d.consumer_uuid for d in rows} - set(expected):
            if consumer is None:
                continue
            devices = [d.address for d in held_devices(self.session, consumer, self.node.id)]
            release_devices(self.session, consumer, self.node.id)
            self._record(consumer, "pci_freed", devices, self._why_not_live(consumer))

    def _why_not_live(self, consumer: str) -> str:
        migration = self.session.scalars(
            select(Migration).where(Migration.uuid == consumer)
        ).first()
        if migration is not None:
            return f"migration is {migration.status}"
        instance = self.session.scalars(select(Instance).where(Instance.uuid == consumer)).first()
        if instance is None:
            return "consumer is neither an instance nor a move in flight on this node"
        if instance.deleted:
            return "instance is deleted"
        return f"instance is {instance.vm_state} on {instance.host}/{instance.node}"


def heal_node(
    session: Session,
    node: ComputeNode,
    domains: Mapping[str, Domain],
    guest_exists: Callable[[str], bool] | None = None,
) -> list[ResourceHeal]:
    """Heal ``node`` to what it should hold. ``guest_exists`` asks the hypervisor again
    about an orphan candidate once the database has been read (see ``NodeHealer.run``)."""
    return NodeHealer(session, node, domains, guest_exists).run()


def release_destroyed_orphan(session: Session, host: str, consumer: str) -> list[ResourceHeal]:
    """Give back, on ``host``'s nodes, the usage a heal counted for a guest that has just
    been destroyed (``orphan_counted``), inside the caller's transaction.

    Without this the count would stay until the next ``update_available_resource``, a
    window in which the allocations exceed what the live servers and moves hold. Nova has
    the same window (its orphan usage lives in the resource tracker until the next audit);
    novaq closes it. Only an orphan's count goes: nothing happens for a live instance
    (taken over by another operation, say), nor on a node that still expects the consumer.
    """
    live = session.scalars(
        select(Instance.id).where(Instance.uuid == consumer, Instance.deleted == 0)
    ).first()
    if live is not None:  # not an orphan: its allocations are its own claim
        return []
    heals: list[ResourceHeal] = []
    nodes = session.scalars(
        select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
    )
    for node in nodes:
        heals += NodeHealer(session, node, {}).release_orphan(consumer)
    return heals


def release_orphan(sessions: Sessions, host: str, consumer: str) -> list[ResourceHeal]:
    """``release_destroyed_orphan`` in its own transaction (retried on a conflict)."""
    return retry_on_conflict(
        sessions, lambda session: release_destroyed_orphan(session, host, consumer)
    )
