"""IoOpsFilter: refuse hosts with ``max_io_ops_per_host`` or more I/O-heavy operations in
flight (builds, resizes, snapshots...)."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class IoOpsFilter(BaseFilter):
    def max_io_ops_per_host(self, host: HostState) -> int:
        """The limit for ``host``; an aggregate variant overrides this one getter."""
        return self.settings.filter_scheduler.max_io_ops_per_host

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        limit = self.max_io_ops_per_host(host)
        if host.num_io_ops >= limit:
            LOG.debug(
                "%s has %d I/O operations in flight (max %d)", host.host, host.num_io_ops, limit
            )
            return False
        return True
