"""DiskFilter: the host must have the requested GB of disk free under its allocation ratio and
reserved amount (placement's capacity, as Nova's DiskFilter had before placement)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class DiskFilter(BaseFilter):
    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        requested = spec.resources.disk_gb
        free = host.free_disk_capacity_gb
        if requested > free:
            LOG.debug("%s: %s requested GB of disk, %s free", host.host, requested, free)
            return False
        return True

    def filter_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[HostState]:
        requested = spec.resources.disk_gb
        # NOTE: the hosts without room go through host_passes, which logs why.
        passes = self.host_passes
        return [h for h in hosts if not requested > h.free_disk_capacity_gb or passes(h, spec)]
