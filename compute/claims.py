"""Claims: allocations guarded by the compute node's generation (placement's
compare-and-swap), so no two claims overcommit a node whichever processes make them.

Capacity follows placement: ``(total - reserved) * allocation_ratio`` per resource class,
and no single consumer may take more than the node's physical total (``max_unit``).
Every write of a node's allocations also rewrites its derived ``*_used`` columns and bumps
its ``generation`` in the same transaction, guarded by the generation read at its start.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

from sqlalchemy import (
    Delete,
    Insert,
    Integer,
    Select,
    String,
    Update,
    and_,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from compute.fresh_claim import USAGE_COLUMNS, Placing, write_fresh_claim
from compute.pci import PciRequest, claim_devices, held_by, held_devices, release_devices
from compute.sessions import Sessions
from models import Allocation, ComputeNode, PciDevice
from models.allocation import DISK_GB, MEMORY_MB, RESOURCE_CLASSES, VCPU
from models.flavor import FlavorSnapshot
from models.pci_device import ALLOCATED, CLAIMED
from models.tables import table_of
from novaq.exceptions import GenerationConflict, NoValidHost, ResourcesUnavailable
from novaq.retrying import after_first_try

LOG = logging.getLogger(__name__)
T = TypeVar("T")
C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class ResourceRequest:
    """What one consumer asks of one node, in placement's units, plus PCI devices."""

    vcpus: int
    memory_mb: int
    disk_gb: int
    pci: tuple[PciRequest, ...] = ()

    @classmethod
    def from_flavor(cls, flavor: FlavorSnapshot, pci: Sequence[PciRequest] = ()) -> ResourceRequest:
        # Nova: DISK_GB = root + ephemeral + ceil(swap MB / 1024).
        disk = flavor.root_gb + flavor.ephemeral_gb + math.ceil(flavor.swap / 1024)
        return cls(vcpus=flavor.vcpus, memory_mb=flavor.memory_mb, disk_gb=disk, pci=tuple(pci))

    @property
    def pci_count(self) -> int:
        return sum(r.count for r in self.pci)

    def as_resources(self) -> dict[str, int]:
        return {VCPU: self.vcpus, MEMORY_MB: self.memory_mb, DISK_GB: self.disk_gb}


def node_totals(node: CapacityNode) -> dict[str, int]:
    return {VCPU: node.vcpus, MEMORY_MB: node.memory_mb, DISK_GB: node.local_gb}


class UsageNode(Protocol):
    """What rewriting a node's derived usage reads of it: a ``ComputeNode``, or the
    columns ``release`` reads of one (``HeldNode``)."""

    @property
    def id(self) -> int: ...
    @property
    def hypervisor_hostname(self) -> str: ...
    @property
    def memory_mb(self) -> int: ...
    @property
    def local_gb(self) -> int: ...
    @property
    def reserved_vcpus(self) -> int: ...
    @property
    def reserved_memory_mb(self) -> int: ...
    @property
    def reserved_disk_gb(self) -> int: ...


class CapacityNode(UsageNode, Protocol):
    """What a node's capacity is computed from: a ``ComputeNode``, or the columns a
    claim reads of one (``ClaimNode``)."""

    @property
    def vcpus(self) -> int: ...
    @property
    def cpu_allocation_ratio(self) -> float: ...
    @property
    def ram_allocation_ratio(self) -> float: ...
    @property
    def disk_allocation_ratio(self) -> float: ...


@dataclass(frozen=True, slots=True)
class HeldNode:
    """The columns of a node ``release`` needs (no ORM object loaded: about 0.3 ms a
    release), with the generation read and whether the consumer holds devices there."""

    id: int
    hypervisor_hostname: str
    memory_mb: int
    local_gb: int
    reserved_vcpus: int
    reserved_memory_mb: int
    reserved_disk_gb: int
    generation: int
    has_devices: bool


@dataclass(frozen=True, slots=True)
class ClaimNode:
    """The columns of a node a claim reads (``_claim_view``): its capacity, its
    generation for the compare-and-swap, and whether it was deleted. Columns, not a
    ``ComputeNode``: loading the ORM object was about a tenth of a scheduling decision."""

    id: int
    hypervisor_hostname: str
    deleted: int
    generation: int
    vcpus: int
    memory_mb: int
    local_gb: int
    reserved_vcpus: int
    reserved_memory_mb: int
    reserved_disk_gb: int
    cpu_allocation_ratio: float
    ram_allocation_ratio: float
    disk_allocation_ratio: float


#: The ``compute_nodes`` columns of a ``ClaimNode``, in its fields' order.
_CLAIM_NODE_COLUMNS = tuple(ClaimNode.__dataclass_fields__)


def node_reserved(node: UsageNode) -> dict[str, int]:
    return {
        VCPU: node.reserved_vcpus,
        MEMORY_MB: node.reserved_memory_mb,
        DISK_GB: node.reserved_disk_gb,
    }


def node_capacity(node: CapacityNode) -> dict[str, float]:
    """Placement's capacity: (total - reserved) * ratio, per resource class."""
    ratios = {
        VCPU: node.cpu_allocation_ratio,
        MEMORY_MB: node.ram_allocation_ratio,
        DISK_GB: node.disk_allocation_ratio,
    }
    totals, reserved = node_totals(node), node_reserved(node)
    return {rc: (totals[rc] - reserved[rc]) * ratios[rc] for rc in RESOURCE_CLASSES}


def allocation_usage(session: Session, node_id: int) -> dict[str, int]:
    rows = session.execute(
        select(Allocation.resource_class, func.sum(Allocation.used))
        .where(Allocation.compute_node_id == node_id)
        .group_by(Allocation.resource_class)
    ).all()
    usage = dict.fromkeys(RESOURCE_CLASSES, 0)
    usage.update({rc: int(total or 0) for rc, total in rows})
    return usage


def check_capacity(node: CapacityNode, usage: Mapping[str, int], request: ResourceRequest) -> None:
    """Raise ``ResourcesUnavailable`` if ``request`` does not fit on ``node``."""
    capacity, totals = node_capacity(node), node_totals(node)
    problems = []
    for rc, amount in request.as_resources().items():
        if amount == 0:
            continue  # placement checks only what is asked for (root_gb=0: no DISK_GB)
        if amount > totals[rc]:
            problems.append(f"{rc} {amount} exceeds the node's total {totals[rc]}")
        elif usage[rc] + amount > capacity[rc]:
            free = capacity[rc] - usage[rc]
            problems.append(f"{rc} requested {amount}, free {free:g} of capacity {capacity[rc]:g}")
    if problems:
        raise ResourcesUnavailable(node=node.hypervisor_hostname, reason="; ".join(problems))


def write_usage(session: Session, node: UsageNode, generation: int) -> int:
    """Rewrite the node's derived usage from its allocations and bump its generation,
    if nobody else did since ``generation`` was read. Returns the new generation.

    One statement (``_rewrite_usage_statement``): the usage is summed by the UPDATE
    itself, in the caller's transaction (issue 16: a release, a claim that is not fresh,
    a move's re-keying each read it in a SELECT of its own first)."""
    session.flush()  # the ORM's pending writes first, as an ORM statement's autoflush did
    params = {"r_node": node.id, "r_generation": generation}
    # (a Core statement on the table: on the connection, no ORM execution layer)
    result = session.connection().execute(_rewrite_usage_statement(), params)
    if result.rowcount != 1:
        raise GenerationConflict(node=node.hypervisor_hostname, generation=generation)
    return generation + 1


@functools.cache
def _rewrite_usage_statement() -> Update:
    """``write_usage``'s compare-and-swap, the derived columns computed from the node's
    allocations in the statement (``UPDATE ... FROM`` one aggregate of them: the values
    ``_usage_values`` computes from the sums and the count of distinct consumers). On the table, as
    ``_write_usage_statement``."""
    allocations, nodes = _ALLOCATIONS.c, _NODES.c
    node_id = bindparam("r_node", type_=Integer)

    def total(resource_class: str) -> Any:
        used = case((allocations.resource_class == resource_class, allocations.used), else_=0)
        return func.coalesce(func.sum(used), 0).label(resource_class.lower())

    usage = (
        select(
            node_id.label("node"),  # (one row, even for a node with no allocations)
            total(VCPU),
            total(MEMORY_MB),
            total(DISK_GB),
            func.count(func.distinct(allocations.consumer_uuid)).label("consumers"),
        )
        .where(allocations.compute_node_id == node_id)
        .subquery("usage")
    )
    memory_used = nodes.reserved_memory_mb + usage.c.memory_mb
    disk_used = nodes.reserved_disk_gb + usage.c.disk_gb
    return (
        update(_NODES)
        .where(
            nodes.id == usage.c.node,
            nodes.generation == bindparam("r_generation", type_=Integer),
        )
        .values(
            vcpus_used=nodes.reserved_vcpus + usage.c.vcpu,
            memory_mb_used=memory_used,
            local_gb_used=disk_used,
            free_ram_mb=nodes.memory_mb - memory_used,
            free_disk_gb=nodes.local_gb - disk_used,
            running_vms=usage.c.consumers,
            generation=nodes.generation + 1,
        )
    )


def store_usage(
    session: Session,
    node: ComputeNode,
    generation: int,
    usage: Mapping[str, int],
    consumers: int,
) -> bool:
    """Write the node's derived usage, ``usage`` of its allocations by ``consumers``
    consumers as the caller read them in this transaction, only when it differs from the
    node's columns: then with the generation compare-and-swap of ``write_usage`` (which
    raises ``GenerationConflict`` if a claim or release committed since ``generation``
    was read), and the node's attributes set to what was written. Returns whether it
    wrote. The resource audit's steady state writes nothing and bumps no generation."""
    values = _usage_values(node, usage, consumers)
    if all(getattr(node, name) == values[f"b_{name}"] for name in _USAGE_COLUMNS):
        return False
    _compare_and_swap(session, node, generation, values)
    for name in _USAGE_COLUMNS:
        set_committed_value(node, name, values[f"b_{name}"])
    set_committed_value(node, "generation", generation + 1)
    return True


#: The node's columns derived from its allocations.
_USAGE_COLUMNS = USAGE_COLUMNS
#: The tables the usage compare-and-swap and the release write, as Core statements.
_NODES: Final = table_of(ComputeNode)
_ALLOCATIONS: Final = table_of(Allocation)


def _usage_values(node: UsageNode, usage: Mapping[str, int], consumers: int) -> dict[str, int]:
    """The derived columns' values (as ``_write_usage_statement`` binds them, ``b_*``)."""
    reserved = node_reserved(node)
    vcpus_used = reserved[VCPU] + usage[VCPU]
    memory_used = reserved[MEMORY_MB] + usage[MEMORY_MB]
    disk_used = reserved[DISK_GB] + usage[DISK_GB]
    return {
        "b_vcpus_used": vcpus_used,
        "b_memory_mb_used": memory_used,
        "b_local_gb_used": disk_used,
        "b_free_ram_mb": node.memory_mb - memory_used,
        "b_free_disk_gb": node.local_gb - disk_used,
        "b_running_vms": consumers or 0,
    }


def _compare_and_swap(
    session: Session, node: UsageNode, generation: int, values: dict[str, int]
) -> None:
    params = {"b_node": node.id, "b_generation": generation, **values}
    session.flush()  # the ORM's pending writes first, as an ORM statement's autoflush did
    # (a Core statement on the table: on the connection, no ORM execution layer)
    result = session.connection().execute(_write_usage_statement(), params)
    if result.rowcount != 1:
        raise GenerationConflict(node=node.hypervisor_hostname, generation=generation)


@functools.cache
def _write_usage_statement() -> Update:
    """The generation compare-and-swap with the derived usage (``write_usage``).

    NOTE: on the table, not the mapped class, as ``_delete_allocations``: the same SQL
    without the ORM's bulk-persistence pass (about 70 us a statement, in every claim and
    release)."""
    nodes = _NODES.c
    return (
        update(_NODES)
        .where(nodes.id == bindparam("b_node"), nodes.generation == bindparam("b_generation"))
        .values(
            {name: bindparam(f"b_{name}") for name in _USAGE_COLUMNS}
            | {"generation": bindparam("b_generation") + 1}
        )
    )


def claim(
    session: Session,
    node_id: int,
    consumer_uuid: str,
    request: ResourceRequest,
    instance_uuid: str | None = None,
    placing: Placing | None = None,
) -> int | None:
    """One claim attempt inside the caller's transaction (which must roll back on error):
    allocations, then PCI devices, then the generation compare-and-swap.

    Idempotent: a consumer that already holds exactly this request on this node is left
    as it is (a redelivered message claims nothing twice). ``instance_uuid`` owns the
    devices (defaults to the consumer; differs when a migration is the consumer).

    ``placing``: an UPDATE the caller writes with the claim. On PostgreSQL a fresh claim
    without PCI devices writes it in the claim's one statement (``compute.fresh_claim``)
    and returns how many rows it updated; otherwise None, and the caller runs it.
    """
    view = _claim_view(session, consumer_uuid, node_id)
    node = view.node
    if node is None or node.deleted:
        raise ResourcesUnavailable(node=str(node_id), reason="compute node is gone")
    generation, held, devices, usage = node.generation, view.held, view.devices, view.usage
    if held == {rc: n for rc, n in request.as_resources().items() if n} and (
        devices == request.pci_count
    ):
        return None
    fresh = not held and not devices
    if fresh and placing is not None and _in_one_statement(session, request):
        check_capacity(node, usage, request)
        return _claim_in_one_statement(session, node, view, request, consumer_uuid, placing)
    if not fresh:
        _delete_allocations(session, consumer_uuid, node_id)
        release_devices(session, consumer_uuid, node_id)
        usage = allocation_usage(session, node_id)
    check_capacity(node, usage, request)
    rows = [
        dict(compute_node_id=node_id, consumer_uuid=consumer_uuid, resource_class=rc, used=amount)
        for rc, amount in request.as_resources().items()
        if amount
    ]
    session.flush()
    if rows:  # one statement for every resource class (on the connection, as the others)
        session.connection().execute(_insert_allocations(), rows)
    if request.pci:
        claim_devices(session, node_id, consumer_uuid, instance_uuid or consumer_uuid, request.pci)
    if fresh:  # the usage read with the generation, plus what was inserted: no read again
        after = {rc: usage[rc] + n for rc, n in request.as_resources().items()}
        values = _usage_values(node, after, view.consumers + bool(rows))
        _compare_and_swap(session, node, generation, values)
    else:
        write_usage(session, node, generation)
    return None


class UnwrittenConflict(GenerationConflict):
    """A fresh claim's one statement found the node's generation moved and wrote nothing
    (its INSERT and its placing hang on the compare-and-swap): the caller's transaction
    is as it was before the claim. Where each statement reads what committed before it
    (PostgreSQL's read committed), the claim may be made again in that transaction."""


def _in_one_statement(session: Session, request: ResourceRequest) -> bool:
    """Whether a fresh claim of ``request`` writes in one statement: on PostgreSQL (its
    data-modifying CTEs), with some resource asked for and no PCI device (whose claim
    runs between the allocations and the compare-and-swap)."""
    return (
        not request.pci
        and any(request.as_resources().values())
        and session.get_bind().dialect.name == "postgresql"
    )


def _claim_in_one_statement(
    session: Session,
    node: ClaimNode,
    view: _ClaimView,
    request: ResourceRequest,
    consumer_uuid: str,
    placing: Placing,
) -> int:
    """The fresh claim's writes and ``placing`` in one statement; the compare-and-swap's
    ``GenerationConflict`` as the separate statements raise it. Returns the rows placed."""
    session.flush()  # whatever the caller left pending goes first, as before the INSERT
    amounts = [(rc, n) for rc, n in request.as_resources().items() if n]
    after = {rc: view.usage[rc] + n for rc, n in request.as_resources().items()}
    values = _usage_values(node, after, view.consumers + 1)
    swapped, placed = write_fresh_claim(
        session, node.id, consumer_uuid, amounts, node.generation, values, placing
    )
    if swapped != 1:
        raise UnwrittenConflict(node=node.hypervisor_hostname, generation=node.generation)
    return placed


@functools.cache
def _insert_allocations() -> Insert:
    # NOTE: Core, on the table: the ORM's bulk insert of the same rows cost a claim more
    # than the statement's round trip (it sorts and splits them by mapper first).
    return insert(_ALLOCATIONS)


@dataclass(frozen=True, slots=True)
class _ClaimView:
    """What a claim reads before it writes (``_claim_view``)."""

    node: ClaimNode | None
    held: dict[str, int]
    devices: int
    usage: dict[str, int]
    consumers: int


#: What ``held`` counts for allocations of the consumer on the node in a resource class
#: other than ``RESOURCE_CLASSES`` (never written by novaq): it holds something else there,
#: so the claim is not fresh and replaces it.
_OTHER_CLASSES = "#other"


def _claim_view(session: Session, consumer_uuid: str, node_id: int) -> _ClaimView:
    """What a claim reads before it writes, in one statement: the node's columns as they
    are now (its generation is the compare-and-swap's), the consumer's allocations on it
    (``consumer_allocations``), how many PCI devices it holds there (``held_devices``),
    the node's usage (``allocation_usage``) and how many consumers hold allocations on it
    (the node's ``running_vms``). No row: the node does not exist."""
    params = {"consumer": consumer_uuid, "node": node_id}
    session.flush()  # the ORM's pending writes first, as the ORM query's autoflush did
    row = session.connection().execute(_claim_view_query(), params).first()
    if row is None:
        return _ClaimView(None, {}, 0, dict.fromkeys(RESOURCE_CLASSES, 0), 0)
    width, classes = len(_CLAIM_NODE_COLUMNS), len(RESOURCE_CLASSES)
    totals = row[width : width + classes]
    owned = row[width + classes : width + 2 * classes]
    own_rows = row[width + 2 * classes : width + 3 * classes]
    other, consumers, devices = row[width + 3 * classes :]
    usage = {rc: int(total or 0) for rc, total in zip(RESOURCE_CLASSES, totals, strict=True)}
    # One row per (node, consumer, class): a class the consumer has a row in is held,
    # with that row's value.
    held = {
        rc: int(own or 0)
        for rc, own, rows in zip(RESOURCE_CLASSES, owned, own_rows, strict=True)
        if rows
    }
    if other:
        held[_OTHER_CLASSES] = int(other)
    node = ClaimNode(*row[:width])
    return _ClaimView(node, held, int(devices or 0), usage, int(consumers or 0))


@functools.cache
def _claim_view_query() -> Select[tuple[object, ...]]:
    """``_claim_view``'s statement: the node's row beside one aggregate of its
    allocations (each class's total, the consumer's own amount and rows in each class,
    its rows in any other class, the distinct consumers) and the count of the consumer's
    devices there.

    NOTE: one pass over the node's allocations, one row back. It was a GROUP BY of them
    by class (a temporary B-tree on SQLite) in a UNION ALL with the devices' count,
    materialised and joined to the node, plus a second walk of them for the distinct
    consumers: four rows to unpack, and the pages of two of the table's indexes read in
    every claim (issue 16). On the tables (as ``_write_usage_statement``), mapped
    classes nowhere: a statement that names one runs through the ORM's execution."""
    consumer = bindparam("consumer", type_=String)
    node = bindparam("node", type_=Integer)
    allocation, device = _ALLOCATIONS.c, _DEVICES_TABLE.c
    # The constants are SQL literals: a bound parameter each (25 of them) cost every
    # claim their processing, for values that never change.
    zero: Any = literal_column("0")
    one: Any = literal_column("1")
    known: dict[str, Any] = {rc: literal_column(f"'{rc}'") for rc in RESOURCE_CLASSES}
    mine = allocation.consumer_uuid == consumer
    own = {rc: and_(mine, allocation.resource_class == known[rc]) for rc in RESOURCE_CLASSES}
    totals = [
        func.sum(case((allocation.resource_class == known[rc], allocation.used), else_=zero))
        for rc in RESOURCE_CLASSES
    ]
    owned = [func.sum(case((own[rc], allocation.used), else_=zero)) for rc in RESOURCE_CLASSES]
    own_rows = [func.count(case((own[rc], one))) for rc in RESOURCE_CLASSES]
    other = func.count(case((and_(mine, allocation.resource_class.not_in(known.values())), one)))
    usage = (
        select(
            *(c.label(f"total_{i}") for i, c in enumerate(totals)),
            *(c.label(f"own_{i}") for i, c in enumerate(owned)),
            *(c.label(f"own_rows_{i}") for i, c in enumerate(own_rows)),
            other.label("other"),
            func.count(func.distinct(allocation.consumer_uuid)).label("consumers"),
        )
        .where(allocation.compute_node_id == node)
        .subquery("usage")
    )
    # ``compute.pci.held_by``'s conditions, on the table.
    devices = (
        select(func.count())
        .where(
            device.consumer_uuid == consumer,
            device.status.in_([literal_column(f"'{s}'") for s in (CLAIMED, ALLOCATED)]),
            device.deleted == zero,
            device.compute_node_id == node,
        )
        .scalar_subquery()
    )
    return (
        select(
            *(_NODES.c[name] for name in _CLAIM_NODE_COLUMNS),
            *(usage.c[f"{kind}_{i}"] for kind in ("total", "own", "own_rows") for i in range(3)),
            usage.c.other,
            usage.c.consumers,
            devices,
        )
        .select_from(_NODES)
        .join(usage, true())
        .where(_NODES.c.id == node)
    )


#: The ``pci_devices`` table (``_claim_view_query``).
_DEVICES_TABLE: Final = table_of(PciDevice)


def release(session: Session, consumer_uuid: str, node_id: int | None = None) -> int:
    """Remove the consumer's allocations and PCI devices (on one node or everywhere) inside
    the caller's transaction. Returns how many allocation rows and devices went; 0 means
    there was nothing to release. One query finds what the consumer holds (its nodes'
    columns as they are now, and whether it holds devices there)."""
    removed = 0
    params = {"consumer": consumer_uuid, "node": node_id}
    session.flush()  # the ORM's pending writes first, as an ORM statement's autoflush did
    # (Core statements on the tables, as every one of a release: on the connection)
    connection = session.connection()
    held = [
        HeldNode(*row) for row in connection.execute(_holdings_query(node_id is not None), params)
    ]
    for node in held:
        removed += _delete_allocations(session, consumer_uuid, node.id)
        if node.has_devices:
            removed += release_devices(session, consumer_uuid, node.id)
        write_usage(session, node, node.generation)
    return removed


@functools.cache
def _holdings_query(one_node: bool) -> Select[tuple[int, str, int, int, int, int, int, int, bool]]:
    """The nodes where the consumer (``:consumer``) holds allocations or devices, by id
    (``:node`` only, when ``one_node``): ``HeldNode``'s columns, with whether it holds
    devices there. On the table: no ORM object is loaded."""
    consumer = bindparam("consumer", type_=String)
    nodes = _NODES.c
    node_ids = union_all(
        select(Allocation.compute_node_id).where(Allocation.consumer_uuid == consumer),
        select(PciDevice.compute_node_id).where(*held_by(consumer)),
    )
    devices = (
        select(PciDevice.id)
        .where(
            PciDevice.consumer_uuid == consumer,
            PciDevice.status.in_((CLAIMED, ALLOCATED)),
            PciDevice.compute_node_id == nodes.id,
        )
        .exists()
    )
    query = (
        select(
            nodes.id,
            nodes.hypervisor_hostname,
            nodes.memory_mb,
            nodes.local_gb,
            nodes.reserved_vcpus,
            nodes.reserved_memory_mb,
            nodes.reserved_disk_gb,
            nodes.generation,
            devices.label("has_devices"),
        )
        .where(nodes.id.in_(node_ids.scalar_subquery()))
        .order_by(nodes.id)
        # NOTE: the node rows are locked as they are read (PostgreSQL, MySQL; SQLite's
        # writers are one at a time already). Without it, two releases on one node both
        # read its generation, and the second's compare-and-swap waited for the first's
        # row lock only to miss the generation and retry its whole transaction (about
        # one terminate in two on PostgreSQL under boot_bench's deletes). Locked here, it
        # waits once, then reads the generation and the allocations the first committed.
        .with_for_update(of=_NODES)
    )
    if one_node:
        query = query.where(nodes.id == bindparam("node", type_=Integer))
    return query


def consumer_allocations(
    session: Session, consumer_uuid: str, node_id: int | None = None
) -> dict[str, int]:
    query = select(Allocation.resource_class, Allocation.used).where(
        Allocation.consumer_uuid == consumer_uuid
    )
    if node_id is not None:
        query = query.where(Allocation.compute_node_id == node_id)
    return {rc: used for rc, used in session.execute(query).all()}


def _delete_allocations(session: Session, consumer_uuid: str, node_id: int) -> int:
    session.flush()  # the ORM's pending writes first, as an ORM statement's autoflush did
    params = {"d_consumer": consumer_uuid, "d_node": node_id}
    result = session.connection().execute(_delete_statement(), params)
    return int(result.rowcount)


@functools.cache
def _delete_statement() -> Delete:
    """``_delete_allocations``'s DELETE, built once (every release and every claim that
    replaces what it held runs it)."""
    held = _ALLOCATIONS.c
    return delete(_ALLOCATIONS).where(
        held.consumer_uuid == bindparam("d_consumer", type_=held.consumer_uuid.type),
        held.compute_node_id == bindparam("d_node", type_=held.compute_node_id.type),
    )


#: What ``retry_on_conflict`` tries again (the scheduler's one-transaction claim too).
RETRYABLE = (GenerationConflict, IntegrityError, OperationalError)


def retry_on_conflict(sessions: Sessions, work: Callable[[Session], T], attempts: int = 25) -> T:
    """Run ``work`` in its own transaction, again after a generation conflict (or a
    deadlock / serialization failure the database reports), with a little random
    exponential backoff (full jitter, at most 0.1 s), as Nova's report client retries
    placement's 409s. The last failure is raised once ``attempts`` are spent."""

    def once() -> T:
        with sessions() as session:
            return work(session)

    # The first try bare: a ``Retrying`` is built only after a conflict (issue 16: every
    # claim comes through here, and almost every one succeeds at once).
    try:
        return once()
    except RETRYABLE as exc:
        if attempts <= 1:
            raise
        first = exc
    retrying = Retrying(
        retry=retry_if_exception_type(RETRYABLE),
        stop=stop_after_attempt(attempts),
        wait=wait_random_exponential(multiplier=0.01, max=0.1),
        before_sleep=before_sleep_log(LOG, logging.DEBUG),
        reraise=True,
    )
    return after_first_try(retrying, first, once)


@dataclass(frozen=True, slots=True)
class FirstFit(Generic[C]):
    """What ``claim_first`` got: the candidate claimed and its index in the candidates, or
    None, and why each candidate before it refused."""

    chosen: C | None
    index: int
    lost: tuple[str, ...]

    def no_valid_host(self) -> NoValidHost:
        # The message may be cut at the fault's 255 characters: the details keep each host.
        return NoValidHost(
            reason="Every host that passed the filters was taken by other claims meanwhile ("
            + "; ".join(self.lost)
            + ").",
            fault_details="\n".join(self.lost),
        )


def claim_first(
    sessions: Sessions,
    candidates: Sequence[C],
    claim: Callable[[Session, C], None],
    host_of: Callable[[C], str],
    refused: Callable[[C, ResourcesUnavailable], None] | None = None,
) -> FirstFit[C]:
    """Claim on the first of ``candidates`` that still fits: ``claim`` runs in its own
    transaction for each in turn (retried on a generation conflict) until one does not
    raise ``ResourcesUnavailable`` (other claims took the room since the candidates were
    ranked). Any other error, e.g. the instance left the state the claim expects,
    propagates. The scheduler's placement and move claims and the reschedules of a build
    or a move to its alternates all go through here."""
    lost: list[str] = []
    for index, candidate in enumerate(candidates):
        try:
            retry_on_conflict(sessions, lambda session, c=candidate: claim(session, c))  # type: ignore[misc]
        except ResourcesUnavailable as exc:
            if refused is not None:
                refused(candidate, exc)
            lost.append(f"{host_of(candidate)}: {exc}")
            continue
        return FirstFit(candidate, index, tuple(lost))
    return FirstFit(None, -1, tuple(lost))


# -- move claims (resize, cold migrate), as Nova keeps them with placement -----------------


def move_claim(
    session: Session,
    instance_uuid: str,
    migration_uuid: str,
    source_node_id: int,
    dest_node_id: int,
    new_request: ResourceRequest,
) -> None:
    """Nova's resize claim: the migration takes over the instance's source allocation (and
    its PCI devices), then the instance claims the new flavor on the destination. On one
    node (same-host resize) both are held at once, as placement double-books."""
    move_consumer(session, instance_uuid, migration_uuid, source_node_id)
    claim(session, dest_node_id, instance_uuid, new_request)


def move_consumer(session: Session, from_uuid: str, to_uuid: str, node_id: int) -> None:
    """Re-key ``from_uuid``'s allocations and devices on ``node_id`` to ``to_uuid``
    (no-op when already moved: idempotent under redelivery)."""
    node = session.get(ComputeNode, node_id, populate_existing=True)
    assert node is not None
    generation = node.generation
    session.execute(
        update(Allocation)
        .where(Allocation.consumer_uuid == from_uuid, Allocation.compute_node_id == node_id)
        .values(consumer_uuid=to_uuid)
        .execution_options(synchronize_session=False)
    )
    for device in held_devices(session, from_uuid, node_id):
        device.consumer_uuid = to_uuid
    session.flush()
    write_usage(session, node, generation)


def confirm_move(session: Session, migration_uuid: str, source_node_id: int) -> None:
    """Confirm: drop what the migration holds on the source."""
    release(session, migration_uuid, source_node_id)


def revert_move(
    session: Session,
    instance_uuid: str,
    migration_uuid: str,
    source_node_id: int,
    dest_node_id: int,
) -> None:
    """Revert: drop the instance's destination claim, give the source back to it."""
    release(session, instance_uuid, dest_node_id)
    move_consumer(session, migration_uuid, instance_uuid, source_node_id)
