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
from operator import attrgetter
from typing import ClassVar

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


class CapacityFilter(BaseFilter):
    #: What the log calls the class ("vCPUs", "MB of RAM", "GB of disk").
    unit: ClassVar[str]
    #: The HostState fields of the class: (total, reserved, used, allocation ratio), as
    #: ``HostState._free`` reads them (``filter_all`` reads them in one call per host).
    fields: ClassVar[tuple[str, str, str, str]]

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
        # NOTE: ``total`` and ``free`` inline (the same arithmetic as HostState._free):
        # three calls per host cost more than the check itself, for each of up to
        # max_placement_results candidates and three filters. The hosts without room go
        # through host_passes, which logs why (and decides as this check does).
        capacity, passes = attrgetter(*self.fields), self.host_passes
        kept = []
        for host in hosts:
            total, reserved, used, ratio = capacity(host)
            free = (total - reserved) * ratio - (used - reserved)
            if (not requested > free and not requested > total) or passes(host, spec):
                kept.append(host)
        return kept
