"""AggregateNumInstancesFilter: NumInstancesFilter whose limit an aggregate's
``max_instances_per_host`` metadata overrides (the smallest when several aggregates set
it; ``[filter_scheduler] max_instances_per_host`` when none does or a value is not an
integer), as Nova's."""

from __future__ import annotations

from scheduler.filters.num_instances_filter import NumInstancesFilter
from scheduler.filters.utils import aggregate_min_int
from scheduler.host_state import HostState

KEY = "max_instances_per_host"


class AggregateNumInstancesFilter(NumInstancesFilter):
    def max_instances_per_host(self, host: HostState) -> int:
        default = self.settings.filter_scheduler.max_instances_per_host
        return aggregate_min_int(host, KEY, default)
