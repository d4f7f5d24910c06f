"""Host filters: one class per module, registered by class name as Nova's are, enabled
and ordered by settings. A filter is pure: no database, broker or hypervisor."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from novaq.exceptions import ConfigError
from novaq.settings import Settings
from scheduler.filters.aggregate_image_properties_isolation import (
    AggregateImagePropertiesIsolation,
)
from scheduler.filters.aggregate_instance_extra_specs_filter import (
    AggregateInstanceExtraSpecsFilter,
)
from scheduler.filters.aggregate_io_ops_filter import AggregateIoOpsFilter
from scheduler.filters.aggregate_multitenancy_isolation import AggregateMultiTenancyIsolation
from scheduler.filters.aggregate_num_instances_filter import AggregateNumInstancesFilter
from scheduler.filters.aggregate_type_affinity_filter import AggregateTypeAffinityFilter
from scheduler.filters.all_hosts_filter import AllHostsFilter
from scheduler.filters.availability_zone_filter import AvailabilityZoneFilter
from scheduler.filters.base import BaseFilter
from scheduler.filters.compute_capabilities_filter import ComputeCapabilitiesFilter
from scheduler.filters.compute_filter import ComputeFilter
from scheduler.filters.core_filter import CoreFilter
from scheduler.filters.different_host_filter import DifferentHostFilter
from scheduler.filters.disk_filter import DiskFilter
from scheduler.filters.image_properties_filter import ImagePropertiesFilter
from scheduler.filters.io_ops_filter import IoOpsFilter
from scheduler.filters.isolated_hosts_filter import IsolatedHostsFilter
from scheduler.filters.json_filter import JsonFilter
from scheduler.filters.metrics_filter import MetricsFilter
from scheduler.filters.num_instances_filter import NumInstancesFilter
from scheduler.filters.pci_passthrough_filter import PciPassthroughFilter
from scheduler.filters.ram_filter import RamFilter
from scheduler.filters.same_host_filter import SameHostFilter
from scheduler.filters.server_group_affinity_filter import ServerGroupAffinityFilter
from scheduler.filters.server_group_anti_affinity_filter import (
    ServerGroupAntiAffinityFilter,
)
from scheduler.filters.simple_cidr_affinity_filter import SimpleCIDRAffinityFilter
from scheduler.host_state import HostState
from scheduler.report import FilterStep
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

__all__ = ["BaseFilter", "load_filters", "run_filters"]


def _registry() -> dict[str, type[BaseFilter]]:
    classes = (
        ComputeFilter,
        ComputeCapabilitiesFilter,
        ImagePropertiesFilter,
        ServerGroupAntiAffinityFilter,
        ServerGroupAffinityFilter,
        AvailabilityZoneFilter,
        AggregateInstanceExtraSpecsFilter,
        SameHostFilter,
        DifferentHostFilter,
        IsolatedHostsFilter,
        NumInstancesFilter,
        IoOpsFilter,
        CoreFilter,
        RamFilter,
        DiskFilter,
        PciPassthroughFilter,
        AggregateIoOpsFilter,
        AggregateNumInstancesFilter,
        AggregateTypeAffinityFilter,
        AllHostsFilter,
        AggregateMultiTenancyIsolation,
        MetricsFilter,
        SimpleCIDRAffinityFilter,
        JsonFilter,
        AggregateImagePropertiesIsolation,
    )
    return {cls.__name__: cls for cls in classes}


def load_filters(settings: Settings, names: Sequence[str]) -> list[BaseFilter]:
    registry = _registry()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ConfigError(
            option="[filter_scheduler] enabled_filters",
            reason=f"unknown filter(s) {', '.join(unknown)}; known: {', '.join(sorted(registry))}",
        )
    return [registry[n](settings) for n in names]


def run_filters(
    filters: Sequence[BaseFilter], hosts: list[HostState], spec: RequestSpec
) -> tuple[list[HostState], list[FilterStep]]:
    """Run the filters in order; stop at the first that leaves no host (as Nova does).
    Returns the passing hosts and, per filter, the hosts before and after (for
    NoValidHost, ``scheduler.report``)."""
    report = []
    for flt in filters:
        before = len(hosts)
        hosts = flt.filter_all(hosts, spec)
        removed = before - len(hosts)
        report.append(FilterStep(type(flt).__name__, before, len(hosts)))
        if removed:
            LOG.debug("Filter %s removed %d host(s)", type(flt).__name__, removed)
        if not hosts:
            LOG.info(
                "Filter %s returned 0 hosts for instance %s", type(flt).__name__, spec.instance_uuid
            )
            break
    return hosts, report
