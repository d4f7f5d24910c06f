"""CrossCellWeigher: during a move that may leave its cell (Nova's cross-cell resize), hosts
in the move's preferred (source) cell weigh 1 and hosts elsewhere -1; for every other
request all hosts weigh 0. The multiplier (1,000,000 by default, overridable per
aggregate) makes staying in the cell win over everything else.

novaq has one cell (``cell1``, ``models.host_mapping``) and no cross-cell move (Nova's
default policy forbids it too), so its moves never set ``allow_cross_cell_move`` and the
weigher is 0 for every host, as Nova's is in a one-cell cloud or with its default policy.
It reads the request's ``requested_cell`` and the host's ``cell`` so that it weighs as
Nova's does if a request ever carries them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class CrossCellWeigher(BaseWeigher):
    option: ClassVar[str] = "cross_cell_move_weight_multiplier"

    def ignores(self, spec: RequestSpec) -> bool:
        return not (spec.requested_cell and spec.allow_cross_cell_move)

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.weigh_all((host,), spec)[0]

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        if self.ignores(spec):
            return [0.0] * len(hosts)
        return [1.0 if h.cell == spec.requested_cell else -1.0 for h in hosts]
