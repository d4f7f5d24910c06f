"""DiskFilter: the host must have the requested GB of disk free under its allocation ratio and
reserved amount (placement's capacity, as Nova's DiskFilter had before placement)."""

from __future__ import annotations

from scheduler.filters.capacity import CapacityFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


class DiskFilter(CapacityFilter):
    """Placement's check of one class (``scheduler.filters.capacity``)."""

    unit = "GB of disk"
    fields = ("local_gb", "reserved_disk_gb", "local_gb_used", "disk_allocation_ratio")

    def requested(self, spec: RequestSpec) -> int:
        return spec.resources.disk_gb

    def total(self, host: HostState) -> int:
        return host.local_gb

    def free(self, host: HostState) -> float:
        return host.free_disk_capacity_gb
