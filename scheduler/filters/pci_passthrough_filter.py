"""PciPassthroughFilter: a host passes only if its free passthrough devices can satisfy
every PCI request of the flavor (Nova's ``pci_stats.support_requests``).

Nova 34's verdicts (``tests/differential``) but for two of its bugs, where novaq passes a
host Nova refuses: a zero count (``alias:0`` asks for no device, yet Nova's
``_apply_request`` fails when no free pool matches the alias), and the requests' order
(Nova serves them in the flavor's order, so an alias without ``device_type`` may take the
VFs a later ``type-VF`` alias needs; novaq serves the typed requests first).
"""

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
