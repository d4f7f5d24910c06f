"""PCIWeigher: keep hosts with passthrough devices for the requests that need them.

As Nova's, the raw value does not depend on the request: ``100 - min(free devices, 99)``,
so the host with the *fewest* free devices wins. For a request without PCI devices that
means hosts with no devices at all are preferred; for a request with PCI devices (where
``PciPassthroughFilter`` has already removed hosts that cannot serve it) it stacks the
request onto the host with the fewest free devices, keeping whole hosts free for larger
requests instead of fragmenting them. The multiplier must not be negative."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher

MAX_DEVS = 100


class PCIWeigher(BaseWeigher):
    option: ClassVar[str] = "pci_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        return [float(MAX_DEVS - min(h.free_pci_devices, MAX_DEVS - 1)) for h in hosts]
