"""Weighers: each returns a raw number per host; only :func:`weigh_hosts` normalises
(0..1 across the candidates, all-equal → 0), multiplies and sums, as Nova's handler."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


class BaseWeigher:
    minval: ClassVar[float | None] = None
    maxval: ClassVar[float | None] = None

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def multiplier(self, host: HostState) -> float:
        return 1.0

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        raise NotImplementedError


def normalize(values: Sequence[float], minval: float | None, maxval: float | None) -> list[float]:
    if not values:
        return []
    lo = min(values) if minval is None else minval
    hi = max(values) if maxval is None else maxval
    if hi <= lo:
        return [0.0 for _ in values]
    return [(min(max(v, lo), hi) - lo) / (hi - lo) for v in values]


def weigh_hosts(
    weighers: Sequence[BaseWeigher], hosts: Sequence[HostState], spec: RequestSpec
) -> list[tuple[float, HostState]]:
    """Hosts with their total weight, best first (stable for equal weights)."""
    totals = [0.0] * len(hosts)
    for weigher in weighers:
        raw = [weigher.weigh(h, spec) for h in hosts]
        for i, value in enumerate(normalize(raw, weigher.minval, weigher.maxval)):
            totals[i] += value * weigher.multiplier(hosts[i])
    return sorted(zip(totals, hosts, strict=True), key=lambda pair: -pair[0])


def load_weighers(settings: Settings) -> list[BaseWeigher]:
    from scheduler.weights.ram import RAMWeigher

    return [RAMWeigher(settings)]
