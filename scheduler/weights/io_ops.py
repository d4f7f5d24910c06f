"""IoOpsWeigher: the raw value is the host's count of I/O-heavy operations in progress
(builds, resizes, snapshots…). The default multiplier is negative (-1.0), so idle hosts
win; a positive multiplier prefers busy hosts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class IoOpsWeigher(BaseWeigher):
    minval: ClassVar[float | None] = 0
    option: ClassVar[str] = "io_ops_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        return [float(h.num_io_ops) for h in hosts]
