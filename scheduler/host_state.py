"""HostState: the scheduler's view of one compute node, built fresh for each request from
the database in a constant number of queries (never one per host)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session

from compute.claims import ResourceRequest
from compute.servicegroup import COMPUTE, is_up
from models import ComputeNode, PciDevice, Service
from models.pci_device import AVAILABLE
from novaq.settings import Settings


@dataclass(frozen=True, slots=True)
class AggregateInfo:
    """An aggregate as the filters see it."""

    id: int
    name: str
    hosts: frozenset[str]
    metadata: dict[str, str]


@dataclass(slots=True)
class HostState:
    host: str
    nodename: str
    compute_node_id: int
    vcpus_total: int
    vcpus_used: int
    memory_mb: int
    memory_mb_used: int
    local_gb: int
    local_gb_used: int
    reserved_vcpus: int
    reserved_memory_mb: int
    reserved_disk_gb: int
    cpu_allocation_ratio: float
    ram_allocation_ratio: float
    disk_allocation_ratio: float
    service_up: bool = True
    service_disabled: bool = False
    num_instances: int = 0
    num_io_ops: int = 0
    failed_builds: int = 0
    instances: set[str] = field(default_factory=set)
    # Free passthrough devices by (vendor_id, product_id, dev_type): Nova's pci_stats pools.
    pci_pools: dict[tuple[str, str, str], int] = field(default_factory=dict)
    aggregates: tuple[AggregateInfo, ...] = ()
    availability_zone: str = "nova"
    hypervisor_type: str = ""
    hypervisor_version: int = 0
    cpu_info: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    # (architecture, hypervisor type, vm mode) triples, as Nova's supported_instances.
    supported_instances: tuple[tuple[str, str, str], ...] = ()

    def aggregate_metadata(self) -> dict[str, set[str]]:
        """Every aggregate metadata key of this host with the set of its values (Nova's
        ``aggregate_metadata_get_by_host``)."""
        merged: dict[str, set[str]] = {}
        for aggregate in self.aggregates:
            for key, value in aggregate.metadata.items():
                merged.setdefault(key, set()).add(value)
        return merged

    @property
    def free_pci_devices(self) -> int:
        return sum(self.pci_pools.values())

    @property
    def free_ram_mb(self) -> int:
        return self.memory_mb - self.memory_mb_used

    @property
    def free_disk_mb(self) -> int:
        return (self.local_gb - self.local_gb_used) * 1024

    def _free(self, total: int, reserved: int, used: int, ratio: float) -> float:
        # Placement's capacity minus what allocations hold (``used`` includes reserved).
        return (total - reserved) * ratio - (used - reserved)

    @property
    def free_vcpus_capacity(self) -> float:
        return self._free(
            self.vcpus_total, self.reserved_vcpus, self.vcpus_used, self.cpu_allocation_ratio
        )

    @property
    def free_ram_capacity_mb(self) -> float:
        return self._free(
            self.memory_mb, self.reserved_memory_mb, self.memory_mb_used, self.ram_allocation_ratio
        )

    @property
    def free_disk_capacity_gb(self) -> float:
        return self._free(
            self.local_gb, self.reserved_disk_gb, self.local_gb_used, self.disk_allocation_ratio
        )

    def consume(self, request: ResourceRequest, instance_uuid: str | None = None) -> None:
        """Debit a pick from this state, so the next pick of the same request sees it."""
        self.vcpus_used += request.vcpus
        self.memory_mb_used += request.memory_mb
        self.local_gb_used += request.disk_gb
        self.num_instances += 1
        self.num_io_ops += 1
        if instance_uuid:
            self.instances.add(instance_uuid)
        for pci in request.pci:
            key = (pci.vendor_id, pci.product_id, pci.device_type)
            self.pci_pools[key] = self.pci_pools.get(key, 0) - pci.count


def load_host_states(session: Session, settings: Settings) -> list[HostState]:
    """Every live compute node with its service, in one query."""
    rows = session.execute(
        select(ComputeNode, Service)
        .outerjoin(
            Service,
            and_(
                Service.host == ComputeNode.host,
                Service.binary == COMPUTE,
                Service.deleted == 0,
            ),
        )
        .where(ComputeNode.deleted == 0)
        .order_by(ComputeNode.host, ComputeNode.hypervisor_hostname)
    ).all()
    states = [_host_state(node, service, settings) for node, service in rows]
    pools = _free_pci_pools(session)
    for state in states:
        state.pci_pools = pools.get(state.compute_node_id, {})
    return states


def _free_pci_pools(session: Session) -> dict[int, dict[tuple[str, str, str], int]]:
    rows = session.execute(
        select(
            PciDevice.compute_node_id,
            PciDevice.vendor_id,
            PciDevice.product_id,
            PciDevice.dev_type,
            func.count(),
        )
        .where(PciDevice.status == AVAILABLE, PciDevice.deleted == 0)
        .group_by(
            PciDevice.compute_node_id, PciDevice.vendor_id, PciDevice.product_id, PciDevice.dev_type
        )
    ).all()
    pools: dict[int, dict[tuple[str, str, str], int]] = {}
    for node_id, vendor, product, dev_type, count in rows:
        pools.setdefault(node_id, {})[(vendor, product, dev_type)] = count
    return pools


def _host_state(node: ComputeNode, service: Service | None, settings: Settings) -> HostState:
    return HostState(
        host=node.host,
        nodename=node.hypervisor_hostname,
        compute_node_id=node.id,
        vcpus_total=node.vcpus,
        vcpus_used=node.vcpus_used,
        memory_mb=node.memory_mb,
        memory_mb_used=node.memory_mb_used,
        local_gb=node.local_gb,
        local_gb_used=node.local_gb_used,
        reserved_vcpus=node.reserved_vcpus,
        reserved_memory_mb=node.reserved_memory_mb,
        reserved_disk_gb=node.reserved_disk_gb,
        cpu_allocation_ratio=node.cpu_allocation_ratio,
        ram_allocation_ratio=node.ram_allocation_ratio,
        disk_allocation_ratio=node.disk_allocation_ratio,
        service_up=service is not None and is_up(service, settings),
        service_disabled=service is None or service.disabled,
        num_instances=node.running_vms,
    )
