"""AggregateIoOpsFilter: IoOpsFilter whose limit an aggregate's ``max_io_ops_per_host``
metadata overrides (the smallest when several aggregates set it; ``[filter_scheduler]
max_io_ops_per_host`` when none does or a value is not an integer), as Nova's."""

from __future__ import annotations

from scheduler.filters.io_ops_filter import IoOpsFilter
from scheduler.filters.utils import aggregate_min_int
from scheduler.host_state import HostState

KEY = "max_io_ops_per_host"


class AggregateIoOpsFilter(IoOpsFilter):
    def max_io_ops_per_host(self, host: HostState) -> int:
        return aggregate_min_int(host, KEY, self.settings.filter_scheduler.max_io_ops_per_host)
