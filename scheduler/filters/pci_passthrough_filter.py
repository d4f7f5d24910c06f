"""PciPassthroughFilter: a host passes only if its free passthrough devices can satisfy
every PCI request of the flavor (Nova's ``pci_stats.support_requests``)."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState, take_pci_devices
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class PciPassthroughFilter(BaseFilter):
    def ignores(self, spec: RequestSpec) -> bool:
        return not spec.pci_requests

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        short = take_pci_devices(dict(host.pci_pools), spec.pci_requests)
        if short is not None:
            LOG.debug(
                "%s: too few free devices %s:%s (%s) for %d of alias %s (free: %s)",
                host.host,
                short.vendor_id,
                short.product_id,
                short.device_type or "any type but type-PF",
                short.count,
                short.alias,
                host.pci_pools,
            )
            return False
        return True
