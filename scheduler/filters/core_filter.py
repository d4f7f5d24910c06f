"""CoreFilter: the host must have the requested vCPUs free under its allocation ratio and
reserved amount (placement's capacity, as Nova's CoreFilter had before placement)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class CoreFilter(BaseFilter):
    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        requested = spec.resources.vcpus
        free = host.free_vcpus_capacity
        if requested > free:
            LOG.debug("%s: %s requested vCPUs, %s free", host.host, requested, free)
            return False
        return True

    def filter_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[HostState]:
        requested = spec.resources.vcpus
        # NOTE: the hosts without room go through host_passes, which logs why.
        passes = self.host_passes
        return [h for h in hosts if not requested > h.free_vcpus_capacity or passes(h, spec)]
