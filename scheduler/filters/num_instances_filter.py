"""NumInstancesFilter: refuse hosts already running ``max_instances_per_host`` instances."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class NumInstancesFilter(BaseFilter):
    def max_instances_per_host(self, host: HostState) -> int:
        """The limit for ``host``; an aggregate variant overrides this one getter."""
        return self.settings.filter_scheduler.max_instances_per_host

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        limit = self.max_instances_per_host(host)
        if host.num_instances >= limit:
            LOG.debug("%s runs %d instances (max %d)", host.host, host.num_instances, limit)
            return False
        return True
