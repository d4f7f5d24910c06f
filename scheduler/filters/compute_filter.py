"""ComputeFilter: only hosts whose compute service is enabled and up."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class ComputeFilter(BaseFilter):
    run_filter_once_per_request = True

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        if host.service_disabled:
            LOG.debug("%s is disabled", host.host)
            return False
        if not host.service_up:
            LOG.debug("%s has not been heard from in a while", host.host)
            return False
        return True
