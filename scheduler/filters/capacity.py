"""What Core/Ram/DiskFilter share: placement's check of one resource class, applied by
the filter itself so that it also holds where the SQL capacity pre-filter does not run (a
forced host ``zone:host``, a requested destination).

Placement checks a class only when the request asks for some of it (Nova leaves DISK_GB
out of a boot-from-volume flavor's request, ``root_gb=0``), and then two things: the
amount is at most the node's physical total (``max_unit``: no allocation ratio lets one
server have more vCPUs than the host has), and it fits the free capacity, ``(total -
reserved) * ratio`` minus what allocations hold.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import ClassVar

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class CapacityFilter(BaseFilter):
    #: What the log calls the class ("vCPUs", "MB of RAM", "GB of disk").
    unit: ClassVar[str]

    def requested(self, spec: RequestSpec) -> int:
        raise NotImplementedError

    def total(self, host: HostState) -> int:
        raise NotImplementedError

    def free(self, host: HostState) -> float:
        raise NotImplementedError

    def ignores(self, spec: RequestSpec) -> bool:
        return self.requested(spec) == 0

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        requested = self.requested(spec)
        if not requested:
            return True
        if requested > self.total(host):
            LOG.debug(
                "%s: %s requested %s, more than its total %s (max_unit)",
                host.host,
                requested,
                self.unit,
                self.total(host),
            )
            return False
        if requested > self.free(host):
            LOG.debug(
                "%s: %s requested %s, %s free", host.host, requested, self.unit, self.free(host)
            )
            return False
        return True

    def filter_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[HostState]:
        requested = self.requested(spec)
        if not requested:
            return list(hosts)
        # NOTE: the hosts without room go through host_passes, which logs why.
        passes, free, total = self.host_passes, self.free, self.total
        return [
            h
            for h in hosts
            if (not requested > free(h) and not requested > total(h)) or passes(h, spec)
        ]
