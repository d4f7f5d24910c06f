"""HypervisorVersionWeigher: the raw value is the host's hypervisor version as Nova stores
it (``major * 1,000,000 + minor * 1,000 + micro``; 0 when unknown), so with the default
multiplier (1.0) newer hypervisors win, which helps upgrades; a negative multiplier
prefers older ones."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class HypervisorVersionWeigher(BaseWeigher):
    option: ClassVar[str] = "hypervisor_version_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        return [float(h.hypervisor_version or 0) for h in hosts]
