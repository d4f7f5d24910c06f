"""Weighers: each returns a raw number per host; only :func:`weigh_hosts` clamps, normalises
(0..1 across the candidates, all-equal → 0), multiplies and sums, as Nova's
``BaseWeightHandler.get_weighed_objects``.

Each weigher names its ``[filter_scheduler]`` multiplier in ``option``; an aggregate whose
metadata has the same key overrides it for its hosts (several values → the smallest), as
Nova's ``get_weight_multiplier``. Weighers are enabled and ordered by
``[filter_scheduler] weight_classes``, by class name, through :func:`_registry`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from novaq.exceptions import ConfigError
from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.affinity import (
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
)
from scheduler.weights.base import BaseWeigher
from scheduler.weights.build_failure import BuildFailureWeigher
from scheduler.weights.cpu import CPUWeigher
from scheduler.weights.cross_cell import CrossCellWeigher
from scheduler.weights.disk import DiskWeigher
from scheduler.weights.hypervisor_version import HypervisorVersionWeigher
from scheduler.weights.image_props import ImagePropertiesWeigher
from scheduler.weights.io_ops import IoOpsWeigher
from scheduler.weights.metrics import MetricsWeigher
from scheduler.weights.num_instances import NumInstancesWeigher
from scheduler.weights.pci import PCIWeigher
from scheduler.weights.ram import RAMWeigher

LOG = logging.getLogger(__name__)

__all__ = [
    "BaseWeigher",
    "load_weighers",
    "normalize",
    "weigh_hosts",
]


def normalize(values: Sequence[float], minval: float | None, maxval: float | None) -> list[float]:
    """Map ``values`` onto 0..1: each is first clamped to ``minval``/``maxval``, which (when
    set) also replace the list's own min/max as the ends of the range. All equal → all 0."""
    if not values:
        return []
    clamped = _clamped(values, minval, maxval)
    lo = min(clamped) if minval is None else float(minval)
    hi = max(clamped) if maxval is None else float(maxval)
    if hi <= lo:
        return [0.0] * len(clamped)
    span = hi - lo
    return [(v - lo) / span for v in clamped]


def _clamped(values: Sequence[float], minval: float | None, maxval: float | None) -> list[float]:
    # One comprehension per case: this runs for every weigher over every candidate.
    # ``lo if lo > v else v`` is max(v, lo) exactly (NaN included), without the call.
    if minval is not None and maxval is not None:
        lo, hi = minval, maxval
        return [float(min(lo if lo > v else v, hi)) for v in values]
    if minval is not None:
        lo = minval
        return [float(lo if lo > v else v) for v in values]
    if maxval is not None:
        return [float(min(v, maxval)) for v in values]
    return [float(v) for v in values]


def weigh_hosts(
    weighers: Sequence[BaseWeigher], hosts: Sequence[HostState], spec: RequestSpec
) -> list[tuple[float, HostState]]:
    """Hosts with their total weight, best first (stable for equal weights).

    A single candidate is not weighed at all and gets 0, as in Nova."""
    totals = [0.0] * len(hosts)
    if len(hosts) <= 1:
        return list(zip(totals, hosts, strict=True))
    debug = LOG.isEnabledFor(logging.DEBUG)  # the per-host detail costs at 1,000 hosts
    in_aggregates = [i for i, h in enumerate(hosts) if h.aggregates]
    for weigher in weighers:
        if weigher.ignores(spec):
            continue  # every host weighs the same, so 0 once normalised
        multipliers = _multipliers(weigher, hosts, in_aggregates)
        if not any(multipliers) and not weigher.may_fail_request:
            # Adds 0 to every host (raw values are finite): the weighers Nova ships off
            # (NumInstancesWeigher, ImagePropertiesWeigher) cost nothing.
            continue
        raw = weigher.weigh_all(hosts, spec)
        normalized = normalize(raw, weigher.minval, weigher.maxval)
        totals = [t + m * v for t, m, v in zip(totals, multipliers, normalized, strict=True)]
        if debug:
            scores = {
                (h.host, h.nodename): f"{m} * {v} (raw {r})"
                for h, m, v, r in zip(hosts, multipliers, normalized, raw, strict=True)
            }
            LOG.debug("%s: %s", type(weigher).__name__, scores)
    return sorted(zip(totals, hosts, strict=True), key=lambda pair: -pair[0])


def _multipliers(
    weigher: BaseWeigher, hosts: Sequence[HostState], in_aggregates: list[int]
) -> list[float]:
    """``weigher.multiplier`` of each host. A multiplier depends on the host only through
    its aggregates (``BaseWeigher.multiplier``), so it is asked once for all the hosts in
    none (the setting's value) and once for each host in some (``in_aggregates``: their
    indexes)."""
    plain = next((h for h in hosts if not h.aggregates), None) if in_aggregates else hosts[0]
    result = [weigher.multiplier(plain) if plain is not None else 0.0] * len(hosts)
    for i in in_aggregates:
        result[i] = weigher.multiplier(hosts[i])
    return result


def _registry() -> dict[str, type[BaseWeigher]]:

    classes: tuple[type[BaseWeigher], ...] = (
        RAMWeigher,
        CPUWeigher,
        DiskWeigher,
        IoOpsWeigher,
        BuildFailureWeigher,
        PCIWeigher,
        ServerGroupSoftAffinityWeigher,
        ServerGroupSoftAntiAffinityWeigher,
        MetricsWeigher,
        CrossCellWeigher,
        HypervisorVersionWeigher,
        ImagePropertiesWeigher,
        NumInstancesWeigher,
    )
    return {cls.__name__: cls for cls in classes}


def load_weighers(settings: Settings, names: Iterable[str] | None = None) -> list[BaseWeigher]:
    """The weighers of ``[filter_scheduler] weight_classes`` (or ``names``), in that order.
    An unknown name is a :class:`ConfigError` naming it."""
    names = tuple(settings.filter_scheduler.weight_classes if names is None else names)
    registry = _registry()
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ConfigError(
            option="[filter_scheduler] weight_classes",
            reason=f"unknown weigher(s) {', '.join(unknown)}; known: {', '.join(sorted(registry))}",
        )
    return [registry[n](settings) for n in names]
