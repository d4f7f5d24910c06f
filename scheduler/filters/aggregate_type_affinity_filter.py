"""AggregateTypeAffinityFilter: a host in an aggregate with ``instance_type`` metadata
takes only the flavors named there (comma-separated names); a host whose aggregates set
no ``instance_type`` takes every flavor (Nova's)."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.filters.utils import aggregate_values_from_key
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

KEY = "instance_type"


class AggregateTypeAffinityFilter(BaseFilter):
    run_filter_once_per_request = True

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        values = aggregate_values_from_key(host, KEY)
        name = spec.flavor.name
        if any(name in [part.strip() for part in value.split(",")] for value in values):
            return True
        if values:
            LOG.debug("%s takes only flavors %s, not %s", host.host, sorted(values), name)
        return not values
