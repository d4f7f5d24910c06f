"""NumInstancesWeigher: the raw value is the host's number of instances. Its multiplier is
0 by default (no effect, as Nova's): a negative one spreads instances over the hosts with
fewest, a positive one packs them onto the busiest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class NumInstancesWeigher(BaseWeigher):
    option: ClassVar[str] = "num_instances_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        return [float(h.num_instances) for h in hosts]
