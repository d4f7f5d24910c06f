"""The scheduler's candidate query: one statement per decision that returns, for each
candidate node, everything every filter and weigher reads of every host.

The database computes the per-host facts that would otherwise take a query or a Python
pass each: whether the service is up (its last heartbeat, ``models.liveness``, within
``service_down_time`` of now, given as two bound instants), whether it is disabled, the
host's instance and in-flight I/O counts (correlated counts that read only the covering
index ``ix_instances_host_deleted_vm_state_task_state``) and whether the node has any
free PCI device (so the pools are read only for those nodes).

The statement is built once per shape with bound parameters (so SQLAlchemy compiles it
once), from Core columns (no ORM entity handling per row).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    ARRAY,
    Integer,
    Select,
    String,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    exists,
    func,
    literal_column,
    not_,
    or_,
    select,
    true,
)
from sqlalchemy.orm import Session

from compute.servicegroup import COMPUTE
from compute.stats import IO_TASK_STATES
from models import (
    Aggregate,
    AggregateHost,
    AggregateMetadata,
    ComputeNode,
    Instance,
    PciDevice,
    Service,
    ServiceLiveness,
)
from models.pci_device import AVAILABLE

_node = ComputeNode.__table__.c
_service = Service.__table__.c
_liveness = ServiceLiveness.__table__.c
_instance = Instance.__table__.c
_pci = PciDevice.__table__.c
_aggregate = Aggregate.__table__.c
_aggregate_host = AggregateHost.__table__.c
_aggregate_metadata = AggregateMetadata.__table__.c


def one_of(session: Session, column: Any, values: Sequence[Any], sql_type: Any) -> Any:
    """``column IN values`` as one bound array on PostgreSQL (a thousand separate
    parameters cost more to send than the query does to run), a plain IN elsewhere."""
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(cast(bindparam(None, list(values)), ARRAY(sql_type)))
    return column.in_(list(values))


#: The bound parameter of the queries built once per dialect that read some hosts or
#: nodes (``instances_query``, ``instance_stats_query``, ``pci_pools_query``).
ONE_OF = "one_of"


def _one_of_bound(dialect: str, column: Any, sql_type: Any) -> Any:
    """``one_of`` with the values bound at execution as ``ONE_OF`` (a list), for a
    query built once."""
    if dialect == "postgresql":
        return column == any_(cast(bindparam(ONE_OF), ARRAY(sql_type)))
    return column.in_(bindparam(ONE_OF, expanding=True))


def _sql_literal(value: str | int) -> Any:
    """A constant of the candidate query written into its SQL, not bound: every bound
    parameter is processed at each execution (``IO_TASK_STATES`` was an expanding IN,
    rendered again each time), for values that never change. Only novaq's own constants
    (names without quotes, integers) come here."""
    if isinstance(value, int):
        return literal_column(str(int(value)))
    assert "'" not in value
    return literal_column(f"'{value}'")


def _instance_counts(dialect: str) -> tuple[Any, Any, Any | None]:
    """The host's live instances and in-flight I/O operations, as two columns, and the
    subquery to join laterally for them (None: the columns are correlated subqueries).

    NOTE: on PostgreSQL one LATERAL subquery counts both in one pass over the host's
    instances (``count(*) FILTER``), where two correlated counts walked them twice per
    candidate: the candidate query at 10,000 hosts (1,000 candidates) went from ~9.5 to
    ~7 ms. SQLite has no LATERAL: it keeps the correlated counts."""
    zero, one = _sql_literal(0), _sql_literal(1)
    on_host = and_(_instance.host == _node.host, _instance.deleted == zero)
    building = _instance.vm_state == _sql_literal("building")
    io_task = _instance.task_state.in_([_sql_literal(s) for s in IO_TASK_STATES])
    # NOTE: Nova's io_workload sums its counters (num_vm_building plus each I/O task
    # state's): an instance building in an I/O task counts twice (compute.stats).
    weight = case((building, one), else_=zero) + case((io_task, one), else_=zero)
    if dialect == "postgresql":
        counts = (
            select(
                func.count().label("num_instances"),
                func.coalesce(func.sum(weight).filter(or_(building, io_task)), 0).label(
                    "num_io_ops"
                ),
            )
            .where(on_host)
            .lateral("instance_counts")
        )
        return counts.c.num_instances, counts.c.num_io_ops, counts
    num_instances = select(func.count()).where(on_host).scalar_subquery()
    num_io_ops = (
        select(func.coalesce(func.sum(weight), 0))
        .where(on_host, or_(building, io_task))
        .scalar_subquery()
    )
    return num_instances, num_io_ops, None


def _columns(num_instances: Any, num_io_ops: Any) -> tuple[Any, ...]:
    """The selected columns, in the order ``scheduler.candidates._host_states`` unpacks."""
    last_seen = func.coalesce(_liveness.last_seen_up, _service.created_at)
    instant = _liveness.last_seen_up.type
    service_up = case(
        (
            and_(
                _service.id.is_not(None),
                not_(func.coalesce(_service.forced_down, False)),
                # NOTE: |now - last| <= service_down_time, as compute.servicegroup.is_up.
                last_seen.between(
                    bindparam("up_from", type_=instant), bindparam("up_to", type_=instant)
                ),
            ),
            1,
        ),
        else_=0,
    )
    service_disabled = case((or_(_service.id.is_(None), _service.disabled), 1), else_=0)
    # How many passthrough devices are free: PCIWeigher's whole input for a request
    # without PCI devices, which then needs no pools (``load_candidates``).
    # NOTE: counted only where an EXISTS found one: most nodes have none, and a count for
    # each of a thousand candidates cost ~0.7 ms more per decision at 10,000 hosts.
    free_device = and_(
        _pci.compute_node_id == _node.id, _pci.status == AVAILABLE, _pci.deleted == 0
    )
    pci_free = case(
        (exists().where(free_device), select(func.count()).where(free_device).scalar_subquery()),
        else_=0,
    )
    # The same on every row (evaluated once): whether any aggregate has hosts, so that
    # the aggregates are read only then (usually none has).
    aggregated = exists().where(_aggregate_host.aggregate_id == _aggregate.id)
    return (
        _node.id,
        _node.host,
        _node.hypervisor_hostname,
        _node.hypervisor_type,
        _node.hypervisor_version,
        _node.cpu_info,
        cast(_node.stats, Text),  # parsed once per distinct text, not once per row
        _node.metrics,  # parsed only when a filter or weigher reads it (HostState.metrics)
        _node.vcpus,
        _node.vcpus_used,
        _node.memory_mb,
        _node.memory_mb_used,
        _node.local_gb,
        _node.local_gb_used,
        _node.reserved_vcpus,
        _node.reserved_memory_mb,
        _node.reserved_disk_gb,
        _node.cpu_allocation_ratio,
        _node.ram_allocation_ratio,
        _node.disk_allocation_ratio,
        _node.uuid,
        _node.host_ip,
        service_up,
        service_disabled,
        num_instances,
        num_io_ops,
        pci_free,
        aggregated,
    )


def _room(dialect: str, asked_classes: tuple[bool, bool, bool]) -> list[Any]:
    """Placement's capacity check as SQL: (total - reserved) * ratio - allocated >= asked,
    and no more than the physical total for one consumer (max_unit), for the classes the
    request asks for (``asked_classes``: VCPU, MEMORY_MB, DISK_GB). A class asked for 0
    is left out, as Nova leaves DISK_GB out of a ``root_gb=0`` flavor's request: a node
    whose disk is overcommitted past its capacity still takes a boot-from-volume server.

    NOTE: on PostgreSQL the three capacity checks are one ``least(free - asked, ...) >= 0``
    (the same test: the columns are not nullable). The planner gives each inequality on an
    expression a selectivity of 1/3; three of them made it expect fewer nodes than the
    limit, so it joined and sorted every node instead of walking the primary key in order
    and stopping at the limit (10,000 hosts: 4x slower)."""
    vcpus = bindparam("vcpus", type_=Integer)
    memory_mb = bindparam("memory_mb", type_=Integer)
    disk_gb = bindparam("disk_gb", type_=Integer)
    node = _node
    free = (
        (node.vcpus - node.reserved_vcpus) * node.cpu_allocation_ratio
        - (node.vcpus_used - node.reserved_vcpus),
        (node.memory_mb - node.reserved_memory_mb) * node.ram_allocation_ratio
        - (node.memory_mb_used - node.reserved_memory_mb),
        (node.local_gb - node.reserved_disk_gb) * node.disk_allocation_ratio
        - (node.local_gb_used - node.reserved_disk_gb),
    )
    totals = (node.vcpus, node.memory_mb, node.local_gb)
    checked = [
        (f, a, t)
        for f, a, t, wanted in zip(
            free, (vcpus, memory_mb, disk_gb), totals, asked_classes, strict=True
        )
        if wanted
    ]
    if not checked:
        return []
    max_unit = [t >= a for _, a, t in checked]
    if dialect == "postgresql":
        return [*max_unit, func.least(*(f - a for f, a, _ in checked)) >= 0]
    return [*max_unit, *(f >= a for f, a, _ in checked)]


def _with_service(nodes: Any) -> Any:
    """``nodes`` left-joined to their compute services and those services' liveness
    (``models.liveness``: on SQLite the attached liveness file)."""
    return nodes.outerjoin(
        Service.__table__,
        and_(_service.host == _node.host, _service.binary == COMPUTE, _service.deleted == 0),
    ).outerjoin(ServiceLiveness.__table__, _liveness.service_id == _service.id)


#: The index of the last column every candidate query selects (``_columns``), after
#: which come the placement columns (``candidates_query(..., placement=True)``).
AGGREGATED, PCI_FREE = 27, 26


def _placement_columns() -> tuple[Any, ...]:
    """Whether the instance ``:placement_uuid`` has a row (deleted ones included), and its
    host and node: uncorrelated, so the database reads them once, not once per row."""
    of_instance = _instance.uuid == bindparam("placement_uuid", type_=String)
    return (
        exists().where(of_instance),
        select(_instance.host).where(of_instance).scalar_subquery(),
        select(_instance.node).where(of_instance).scalar_subquery(),
    )


@functools.cache
def candidates_query(
    by_hosts: bool,
    prefiltered: bool,
    dialect: str,
    asked_classes: tuple[bool, bool, bool] = (True, True, True),
    placement: bool = False,
) -> Select[Any]:
    """The candidates of one request, by node id. Parameters: ``up_from``/``up_to``
    always; ``hosts`` (a list) when ``by_hosts``; ``vcpus``, ``memory_mb``, ``disk_gb``
    and ``limit`` when ``prefiltered`` (the placement-style capacity pre-filter, at most
    ``limit`` enabled nodes with room). ``dialect``: the database's; ``asked_classes``:
    which of VCPU, MEMORY_MB, DISK_GB the request asks any of (``_room``).

    ``placement``: three more columns, the same on every row (``_placement_columns``),
    for the instance ``placement_uuid``: a decision for one instance reads where it is
    placed already (a redelivery) in the candidates' statement, one round trip less."""
    num_instances, num_io_ops, counts = _instance_counts(dialect)
    nodes = _with_service(ComputeNode.__table__)
    if counts is not None:
        nodes = nodes.join(counts, true())
    columns = _columns(num_instances, num_io_ops)
    if placement:
        columns += _placement_columns()
    query = select(*columns).select_from(nodes).where(_node.deleted == 0).order_by(_node.id)
    if by_hosts:
        query = query.where(_node.host.in_(bindparam("hosts", expanding=True)))
    elif prefiltered:
        query = query.where(_service.disabled.is_(False), *_room(dialect, asked_classes))
        query = query.limit(bindparam("limit", type_=Integer))
    return query


@functools.cache
def aggregates_query() -> Select[Any]:
    """Every aggregate that has hosts: (id, name, host, metadata key, value), one row per
    host and key (key and value None for an aggregate without metadata)."""
    return (
        select(
            _aggregate.id,
            _aggregate.name,
            _aggregate_host.host,
            _aggregate_metadata.key,
            _aggregate_metadata.value,
        )
        .select_from(Aggregate.__table__)
        .join(AggregateHost.__table__, _aggregate_host.aggregate_id == _aggregate.id)
        .outerjoin(AggregateMetadata.__table__, _aggregate_metadata.aggregate_id == _aggregate.id)
    )


# NOTE: the three queries below are built once per dialect, their hosts or nodes bound at
# execution (``ONE_OF``): a decision reads the PCI pools of every candidate with free
# devices, and building the statement (and its cache key) each time cost more CPU than
# running it.


@functools.cache
def instances_query(dialect: str) -> Select[Any]:
    """(host, uuid, vm_state, task_state) of the live instances on the hosts bound as
    ``ONE_OF``."""
    return select(_instance.host, _instance.uuid, _instance.vm_state, _instance.task_state).where(
        _instance.deleted == 0, _one_of_bound(dialect, _instance.host, String)
    )


@functools.cache
def instance_stats_query(dialect: str) -> Select[Any]:
    """(host, vm_state, task_state, os_type, project_id, count) of the live instances on
    the hosts bound as ``ONE_OF``, grouped: what ``compute.stats.instance_stats``
    counts."""
    groups = (
        _instance.host,
        _instance.vm_state,
        _instance.task_state,
        _instance.os_type,
        _instance.project_id,
    )
    return (
        select(*groups, func.count())
        .where(_instance.deleted == 0, _one_of_bound(dialect, _instance.host, String))
        .group_by(*groups)
    )


@functools.cache
def pci_pools_query(dialect: str) -> Select[Any]:
    """(node id, vendor, product, device type, count) of the free devices of the nodes
    bound as ``ONE_OF``."""
    pool = (_pci.compute_node_id, _pci.vendor_id, _pci.product_id, _pci.dev_type)
    return (
        select(*pool, func.count())
        .where(
            _pci.status == AVAILABLE,
            _pci.deleted == 0,
            _one_of_bound(dialect, _pci.compute_node_id, Integer),
        )
        .group_by(*pool)
    )
