"""AggregateMultiTenancyIsolation: a host in an aggregate whose metadata has keys starting
with ``filter_tenant_id`` (``filter_tenant_id``, ``filter_tenant_id2``, ...) takes only
the servers of the projects those keys list (comma-separated, blanks around a name
ignored), the lists of every such key of every aggregate of the host together; a host
whose aggregates name no project takes every project (Nova's filter of that name).

It keeps other projects out of the isolated hosts; it does not keep the listed projects
in them (Nova's ``[scheduler] limit_tenants_to_placement_aggregate`` does that, and novaq
has no such request filter).
"""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.filters.utils import aggregate_values
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

PREFIX = "filter_tenant_id"


class AggregateMultiTenancyIsolation(BaseFilter):
    run_filter_once_per_request = True

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        if not host.aggregates:
            return True
        projects: set[str] = set()
        for key, values in aggregate_values(host).items():
            if key.startswith(PREFIX):
                projects |= values
        if projects and spec.project_id not in projects:
            LOG.debug(
                "%s takes only projects %s, not %s", host.host, sorted(projects), spec.project_id
            )
            return False
        return True
