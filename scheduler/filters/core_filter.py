"""CoreFilter: the host must have the requested vCPUs free under its allocation ratio and
reserved amount (placement's capacity, as Nova's CoreFilter had before placement)."""

from __future__ import annotations

from scheduler.filters.capacity import CapacityFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


class CoreFilter(CapacityFilter):
    """Placement's check of one class (``scheduler.filters.capacity``)."""

    unit = "vCPUs"
    fields = ("vcpus_total", "reserved_vcpus", "vcpus_used", "cpu_allocation_ratio")

    def requested(self, spec: RequestSpec) -> int:
        return spec.resources.vcpus

    def total(self, host: HostState) -> int:
        return host.vcpus_total

    def free(self, host: HostState) -> float:
        return host.free_vcpus_capacity
