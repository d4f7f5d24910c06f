"""CPUWeigher: more free vCPUs weigh more (spreads with a positive multiplier, stacks with
a negative one). Free is Nova's ``vcpus_total * cpu_allocation_ratio - vcpus_used``,
clamped at 0 (minval) when a host is overcommitted beyond its ratio."""

from __future__ import annotations

from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class CPUWeigher(BaseWeigher):
    minval: ClassVar[float | None] = 0
    option: ClassVar[str] = "cpu_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return host.vcpus_total * host.cpu_allocation_ratio - host.vcpus_used
