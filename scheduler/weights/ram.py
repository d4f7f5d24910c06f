"""RAMWeigher: more free RAM weighs more (spreads with a positive multiplier, stacks with
a negative one). Negative free RAM (overcommit) is clamped at 0, as Nova's minval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class RAMWeigher(BaseWeigher):
    minval: ClassVar[float | None] = 0
    option: ClassVar[str] = "ram_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        return [float(h.free_ram_mb) for h in hosts]
