"""RamFilter: the host must have the requested MB of RAM free under its allocation ratio and
reserved amount (placement's capacity, as Nova's RamFilter had before placement)."""

from __future__ import annotations

from scheduler.filters.capacity import CapacityFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


class RamFilter(CapacityFilter):
    """Placement's check of one class (``scheduler.filters.capacity``)."""

    unit = "MB of RAM"
    fields = ("memory_mb", "reserved_memory_mb", "memory_mb_used", "ram_allocation_ratio")

    def requested(self, spec: RequestSpec) -> int:
        return spec.resources.memory_mb

    def total(self, host: HostState) -> int:
        return host.memory_mb

    def free(self, host: HostState) -> float:
        return host.free_ram_capacity_mb
