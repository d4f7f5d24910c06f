"""BuildFailureWeigher: the raw value is the host's count of recent failed builds, and
the multiplier (1,000,000 by default, overridable per aggregate) is negated, so a host
with more failures weighs less, by enough to outweigh every other weigher."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class BuildFailureWeigher(BaseWeigher):
    option: ClassVar[str] = "build_failure_weight_multiplier"

    def multiplier(self, host: HostState) -> float:
        return -super().multiplier(host)

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        return [float(h.failed_builds) for h in hosts]
