"""AllHostsFilter: every host passes (Nova's no-op filter, for a deployment that wants no
filtering at all)."""

from __future__ import annotations

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


class AllHostsFilter(BaseFilter):
    run_filter_once_per_request = True

    def ignores(self, spec: RequestSpec) -> bool:
        return True

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        return True
