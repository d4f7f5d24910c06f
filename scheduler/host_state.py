"""HostState: the scheduler's view of one compute node, built fresh for each request
(``scheduler.candidates`` reads them in a constant number of queries, never one per host)."""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from compute.claims import ResourceRequest
from compute.monitors import scheduler_values
from compute.pci import PciRequest, type_matches, typed_first
from models.alternate import Alternate
from models.host_mapping import DEFAULT_CELL


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
    # The compute node's uuid and its ``host_ip`` as stored (text, parsed on access:
    # ``host_ip``), read by JsonFilter, SimpleCIDRAffinityFilter, ComputeCapabilitiesFilter.
    uuid: str = ""
    host_ip_text: str | None = None
    # The node's monitor metrics as stored (Nova's JSON text); parsed on first use of
    # ``metrics``, so only a request that a metrics filter or weigher reads pays for it.
    metrics_json: str = "[]"
    _metrics: dict[str, float] | None = field(default=None, repr=False, compare=False)
    # The host's cell (novaq has one: every host is in it).
    cell: str = DEFAULT_CELL
    # How many of the host's instances run an image with each (property, value as Nova
    # spells it): read only for ImagePropertiesWeigher (``scheduler.instance_images``).
    instance_image_props: dict[tuple[str, str], int] = field(default_factory=dict)
    # The number of free passthrough devices when ``pci_pools`` was not read (a request
    # without PCI devices: only PCIWeigher asks, and only how many); None: the pools say.
    pci_free_count: int | None = None

    def aggregate_metadata(self) -> dict[str, set[str]]:
        """Every aggregate metadata key of this host with the set of its values (Nova's
        ``aggregate_metadata_get_by_host``)."""
        merged: dict[str, set[str]] = {}
        for aggregate in self.aggregates:
            for key, value in aggregate.metadata.items():
                merged.setdefault(key, set()).add(value)
        return merged

    @property
    def metrics(self) -> dict[str, float]:
        """Metric values by name as Nova's scheduler reads them (``cpu.percent`` 0..100;
        ``compute.monitors.scheduler_values``); empty when the node stores none."""
        if self._metrics is None:
            text = self.metrics_json
            self._metrics = {} if text in ("[]", "") else scheduler_values(text)
        return self._metrics

    def as_alternate(self) -> Alternate:
        """This node as a place a build or move may go next."""
        return Alternate(self.host, self.nodename, self.compute_node_id)

    @property
    def host_ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        """The address the host reports (Nova's ``HostState.host_ip``, an address object),
        or None when its node has not recorded one."""
        return _parse_ip(self.host_ip_text) if self.host_ip_text else None

    @property
    def free_pci_devices(self) -> int:
        if self.pci_free_count is not None:
            return self.pci_free_count
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
        take_pci_devices(self.pci_pools, request.pci)


@functools.lru_cache(maxsize=4096)
def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    # Parsed only when a filter asks, once per distinct address.
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


PciPools = dict[tuple[str, str, str], int]


def take_pci_devices(pools: PciPools, requests: Sequence[PciRequest]) -> PciRequest | None:
    """Debit ``requests`` from ``pools`` (free devices by vendor, product and type) and
    return None, or return the first request they cannot serve (``pools`` then partly
    debited). Requests that name a device type go first, so a request that takes any type
    but a PF (an alias without ``device_type``) gets what the typed ones leave."""
    for request in typed_first(requests):
        keys = [
            key
            for key in pools
            if key[:2] == (request.vendor_id, request.product_id)
            and type_matches(request.device_type, key[2])
        ]
        wanted = request.count
        if sum(max(pools[key], 0) for key in keys) < wanted:
            return request
        for key in sorted(keys):
            taken = min(max(pools[key], 0), wanted)
            pools[key] -= taken
            wanted -= taken
    return None
