"""CPUWeigher: more free vCPUs weigh more (spreads with a positive multiplier, stacks with
a negative one). Free is Nova's ``vcpus_total * cpu_allocation_ratio - vcpus_used``,
clamped at 0 (minval) when a host is overcommitted beyond its ratio."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class CPUWeigher(BaseWeigher):
    minval: ClassVar[float | None] = 0
    option: ClassVar[str] = "cpu_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        return [h.vcpus_total * h.cpu_allocation_ratio - h.vcpus_used for h in hosts]
