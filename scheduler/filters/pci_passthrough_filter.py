"""PciPassthroughFilter: a host passes only if its free passthrough devices can satisfy
every PCI request of the flavor (Nova's ``pci_stats.support_requests``)."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class PciPassthroughFilter(BaseFilter):
    def ignores(self, spec: RequestSpec) -> bool:
        return not spec.pci_requests

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        needed: dict[tuple[str, str, str], int] = {}
        for request in spec.pci_requests:
            key = (request.vendor_id, request.product_id, request.device_type)
            needed[key] = needed.get(key, 0) + request.count
        for key, count in needed.items():
            if host.pci_pools.get(key, 0) < count:
                LOG.debug(
                    "%s: %d free devices %s, %d requested",
                    host.host,
                    host.pci_pools.get(key, 0),
                    key,
                    count,
                )
                return False
        return True
