"""MetricsWeigher: the raw value is Σ metric × ratio over ``[metrics] weight_setting``
(the compute monitors' metrics as the scheduler reads them: ``cpu.percent`` 0..100), times
``[metrics] weight_multiplier`` (1.0; an aggregate's ``metrics_weight_multiplier``
metadata overrides it, smallest wins), as Nova's.

A host without one of the metrics: with ``[metrics] required`` (the default) the request
fails (``ComputeHostMetricNotFound``, Nova's error; the MetricsFilter keeps such hosts
out); otherwise the host weighs ``[metrics] weight_of_unavailable`` (−10000.0), unless
that metric's ratio or the multiplier is 0, when the metric is skipped. As in Nova, a
single candidate is not weighed, so it never fails for a missing metric."""

from __future__ import annotations

from typing import ClassVar

from novaq.exceptions import ComputeHostMetricNotFound
from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher, aggregate_multiplier

#: The aggregate metadata key that overrides ``[metrics] weight_multiplier``.
AGGREGATE_KEY = "metrics_weight_multiplier"


class MetricsWeigher(BaseWeigher):
    option: ClassVar[str] = AGGREGATE_KEY
    may_fail_request: ClassVar[bool] = True  # a required metric missing

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.setting = settings.metrics.weights

    def multiplier(self, host: HostState) -> float:
        default = self.settings.metrics.weight_multiplier
        if not host.aggregates:
            return default
        return aggregate_multiplier(host, AGGREGATE_KEY, default)

    def ignores(self, spec: RequestSpec) -> bool:
        return not self.setting

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        options = self.settings.metrics
        metrics = host.metrics
        value = 0.0
        for name, ratio in self.setting:
            metric = metrics.get(name)
            if metric is not None:
                value += metric * ratio
            elif options.required:
                raise ComputeHostMetricNotFound(host=host.host, node=host.nodename, name=name)
            elif ratio * self.multiplier(host) != 0:
                return options.weight_of_unavailable
        return value
