"""The host states of a request's candidates, read fresh from the database in a constant
number of queries (never one per host): a placement-style capacity pre-filter in SQL, then
the nodes' services, aggregates, instances and free PCI pools."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ARRAY, Integer, String, and_, any_, bindparam, cast, func, select
from sqlalchemy.orm import Session

from compute.claims import ResourceRequest
from compute.servicegroup import COMPUTE
from models import (
    Aggregate,
    AggregateHost,
    AggregateMetadata,
    ComputeNode,
    Instance,
    PciDevice,
    Service,
    utcnow,
)
from models.pci_device import AVAILABLE
from novaq.settings import Settings
from scheduler.host_state import AggregateInfo, HostState

IO_TASK_STATES = (
    "resize_migrating",
    "rebuilding",
    "resize_prep",
    "image_snapshot",
    "image_backup",
    "rescuing",
    "unshelving",
)


NODE_COLUMNS = (
    ComputeNode.id,
    ComputeNode.host,
    ComputeNode.hypervisor_hostname,
    ComputeNode.hypervisor_type,
    ComputeNode.hypervisor_version,
    ComputeNode.cpu_info,
    ComputeNode.vcpus,
    ComputeNode.vcpus_used,
    ComputeNode.memory_mb,
    ComputeNode.memory_mb_used,
    ComputeNode.local_gb,
    ComputeNode.local_gb_used,
    ComputeNode.reserved_vcpus,
    ComputeNode.reserved_memory_mb,
    ComputeNode.reserved_disk_gb,
    ComputeNode.cpu_allocation_ratio,
    ComputeNode.ram_allocation_ratio,
    ComputeNode.disk_allocation_ratio,
    ComputeNode.stats,
)


@dataclass(frozen=True, slots=True)
class Candidates:
    """Host states of one request, and what the capacity pre-filter kept."""

    hosts: list[HostState]
    prefilter: str


def load_host_states(
    session: Session,
    settings: Settings,
    request: ResourceRequest | None = None,
    hosts: Sequence[str] = (),
) -> list[HostState]:
    return load_candidates(session, settings, request, hosts).hosts


def load_candidates(
    session: Session,
    settings: Settings,
    request: ResourceRequest | None = None,
    hosts: Sequence[str] = (),
) -> Candidates:
    """The compute nodes a request may land on, with their services, PCI pools,
    aggregates and instances, in a constant number of queries whatever the number of hosts.

    With a ``request``, a placement-style pre-filter runs in SQL first: enabled services
    with room for the request under the allocation ratios, at most
    ``[scheduler] max_placement_results`` of them (Nova's limit on allocation candidates).
    ``hosts`` (forced or requested hosts) replaces the pre-filter."""
    query = (
        select(
            *NODE_COLUMNS,
            Service.disabled,
            Service.forced_down,
            Service.last_seen_up,
            Service.created_at.label("service_created_at"),
            Service.id.label("service_id"),
        )
        .select_from(ComputeNode)
        .outerjoin(
            Service,
            and_(Service.host == ComputeNode.host, Service.binary == COMPUTE, Service.deleted == 0),
        )
        .where(ComputeNode.deleted == 0)
        .order_by(ComputeNode.id)
    )
    prefilter = ""
    # The candidate nodes as a subquery, so the per-host queries below need no long IN list.
    chosen = (
        select(ComputeNode.id)
        .select_from(ComputeNode)
        .outerjoin(
            Service,
            and_(Service.host == ComputeNode.host, Service.binary == COMPUTE, Service.deleted == 0),
        )
        .where(ComputeNode.deleted == 0)
    )
    if hosts:
        chosen = chosen.where(ComputeNode.host.in_(list(hosts)))
    elif request is not None:
        chosen = chosen.where(Service.disabled.is_(False), *_room_for(request))
        chosen = chosen.order_by(ComputeNode.id).limit(settings.scheduler.max_placement_results)
    rows = session.execute(query.where(ComputeNode.id.in_(select(chosen.subquery().c.id)))).all()
    if request is not None and not hosts:
        prefilter = f"capacity pre-filter (placement): {len(rows)} enabled hosts with room for " + (
            f"VCPU={request.vcpus}, MEMORY_MB={request.memory_mb}, DISK_GB={request.disk_gb}"
        )
    node_ids = [row.id for row in rows]
    pools = _free_pci_pools(session, node_ids)
    aggregates = _aggregates_by_host(session)
    instances = _instances_by_host(session, sorted({row.host for row in rows}))
    now = utcnow()
    states = []
    for row in rows:
        state = _host_state(row, settings, now)
        state.pci_pools = pools.get(state.compute_node_id, {})
        state.aggregates = aggregates.get(state.host, ())
        state.availability_zone = _availability_zone(state.aggregates, settings)
        uuids, io_ops = instances.get(state.host, (set(), 0))
        state.instances, state.num_instances, state.num_io_ops = set(uuids), len(uuids), io_ops
        states.append(state)
    return Candidates(states, prefilter)


def _room_for(request: ResourceRequest) -> list[Any]:
    """Placement's capacity check as SQL: (total - reserved) * ratio - allocated >= asked,
    and no more than the physical total for one consumer (max_unit)."""
    node = ComputeNode
    return [
        node.vcpus >= request.vcpus,
        node.memory_mb >= request.memory_mb,
        node.local_gb >= request.disk_gb,
        (node.vcpus - node.reserved_vcpus) * node.cpu_allocation_ratio
        - (node.vcpus_used - node.reserved_vcpus)
        >= request.vcpus,
        (node.memory_mb - node.reserved_memory_mb) * node.ram_allocation_ratio
        - (node.memory_mb_used - node.reserved_memory_mb)
        >= request.memory_mb,
        (node.local_gb - node.reserved_disk_gb) * node.disk_allocation_ratio
        - (node.local_gb_used - node.reserved_disk_gb)
        >= request.disk_gb,
    ]


def _availability_zone(aggregates: tuple[AggregateInfo, ...], settings: Settings) -> str:
    if not aggregates:
        return settings.default_availability_zone
    zones = sorted(
        a.metadata["availability_zone"] for a in aggregates if "availability_zone" in a.metadata
    )
    return ",".join(zones) if zones else settings.default_availability_zone


def _aggregates_by_host(session: Session) -> dict[str, tuple[AggregateInfo, ...]]:
    hosts: dict[int, set[str]] = {}
    for aggregate_id, host in session.execute(
        select(AggregateHost.aggregate_id, AggregateHost.host)
    ):
        hosts.setdefault(aggregate_id, set()).add(host)
    if not hosts:
        return {}
    metadata: dict[int, dict[str, str]] = {}
    for aggregate_id, key, value in session.execute(
        select(AggregateMetadata.aggregate_id, AggregateMetadata.key, AggregateMetadata.value)
    ):
        metadata.setdefault(aggregate_id, {})[key] = value
    by_host: dict[str, list[AggregateInfo]] = {}
    for aggregate_id, name in session.execute(select(Aggregate.id, Aggregate.name)):
        info = AggregateInfo(
            aggregate_id,
            name,
            frozenset(hosts.get(aggregate_id, ())),
            metadata.get(aggregate_id, {}),
        )
        for host in info.hosts:
            by_host.setdefault(host, []).append(info)
    return {host: tuple(infos) for host, infos in by_host.items()}


def one_of(session: Session, column: Any, values: Sequence[Any], sql_type: Any) -> Any:
    """``column IN values`` as one bound array on PostgreSQL (a thousand separate
    parameters cost more to send than the query does to run), a plain IN elsewhere."""
    if session.get_bind().dialect.name == "postgresql":
        return column == any_(cast(bindparam(None, list(values)), ARRAY(sql_type)))
    return column.in_(list(values))


def _instances_by_host(session: Session, hosts: Sequence[str]) -> dict[str, tuple[set[str], int]]:
    """Instance uuids per host and Nova's io_workload count (building, or an IO task)."""
    result: dict[str, tuple[set[str], int]] = {}
    if not hosts:
        return result
    rows = session.execute(
        select(Instance.host, Instance.uuid, Instance.vm_state, Instance.task_state).where(
            Instance.deleted == 0, one_of(session, Instance.host, hosts, String)
        )
    )
    for host, uuid, vm_state, task_state in rows:
        uuids, io_ops = result.get(host, (set(), 0))
        uuids.add(uuid)
        if vm_state == "building" or task_state in IO_TASK_STATES:
            io_ops += 1
        result[host] = (uuids, io_ops)
    return result


def _free_pci_pools(
    session: Session, node_ids: Sequence[int]
) -> dict[int, dict[tuple[str, str, str], int]]:
    if not node_ids:
        return {}
    rows = session.execute(
        select(
            PciDevice.compute_node_id,
            PciDevice.vendor_id,
            PciDevice.product_id,
            PciDevice.dev_type,
            func.count(),
        )
        .where(
            PciDevice.status == AVAILABLE,
            PciDevice.deleted == 0,
            one_of(session, PciDevice.compute_node_id, node_ids, Integer),
        )
        .group_by(
            PciDevice.compute_node_id,
            PciDevice.vendor_id,
            PciDevice.product_id,
            PciDevice.dev_type,
        )
    ).all()
    pools: dict[int, dict[tuple[str, str, str], int]] = {}
    for node_id, vendor, product, dev_type, count in rows:
        pools.setdefault(node_id, {})[(vendor, product, dev_type)] = count
    return pools


def _service_up(row: Any, settings: Settings, now: dt.datetime) -> bool:
    if row.service_id is None or row.forced_down:
        return False
    last = row.last_seen_up or row.service_created_at
    return bool(abs((now - last).total_seconds()) <= settings.effective_service_down_time)


@functools.lru_cache(maxsize=256)
def _parse_cpu_info(text: str) -> dict[str, Any]:
    # Most nodes of a cloud share one CPU description: parse each distinct one once.
    return dict(json.loads(text))


def _supported_instances(arch: str, hv_type: str) -> tuple[tuple[str, str, str], ...]:
    # libvirt reports QEMU on a KVM host too; Nova's libvirt driver advertises both.
    if hv_type in ("qemu", "kvm"):
        return ((arch, "kvm", "hvm"), (arch, "qemu", "hvm"))
    return ((arch, hv_type, "hvm"),) if hv_type else ()


def _host_state(row: Any, settings: Settings, now: dt.datetime) -> HostState:
    cpu_info = _parse_cpu_info(row.cpu_info or "{}")
    stats = dict(row.stats or {})
    arch = cpu_info.get("arch") or "x86_64"
    hv_type = (row.hypervisor_type or "").lower()
    return HostState(
        host=row.host,
        nodename=row.hypervisor_hostname,
        compute_node_id=row.id,
        vcpus_total=row.vcpus,
        vcpus_used=row.vcpus_used,
        memory_mb=row.memory_mb,
        memory_mb_used=row.memory_mb_used,
        local_gb=row.local_gb,
        local_gb_used=row.local_gb_used,
        reserved_vcpus=row.reserved_vcpus,
        reserved_memory_mb=row.reserved_memory_mb,
        reserved_disk_gb=row.reserved_disk_gb,
        cpu_allocation_ratio=row.cpu_allocation_ratio,
        ram_allocation_ratio=row.ram_allocation_ratio,
        disk_allocation_ratio=row.disk_allocation_ratio,
        service_up=_service_up(row, settings, now),
        service_disabled=row.service_id is None or bool(row.disabled),
        failed_builds=int(stats.get("failed_builds", 0)),
        hypervisor_type=row.hypervisor_type or "",
        hypervisor_version=row.hypervisor_version or 0,
        cpu_info=cpu_info,
        stats=stats,
        supported_instances=_supported_instances(arch, hv_type),
    )
