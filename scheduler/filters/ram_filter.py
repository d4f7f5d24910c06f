"""RamFilter: the host must have the requested MB of RAM free under its allocation ratio and
reserved amount (placement's capacity, as Nova's RamFilter had before placement)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class RamFilter(BaseFilter):
    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        requested = spec.resources.memory_mb
        free = host.free_ram_capacity_mb
        if requested > free:
            LOG.debug("%s: %s requested MB of RAM, %s free", host.host, requested, free)
            return False
        return True

    def filter_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[HostState]:
        requested = spec.resources.memory_mb
        # NOTE: the hosts without room go through host_passes, which logs why.
        passes = self.host_passes
        return [h for h in hosts if not requested > h.free_ram_capacity_mb or passes(h, spec)]
