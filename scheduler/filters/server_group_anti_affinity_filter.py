"""ServerGroupAntiAffinityFilter: for a group with the ``anti-affinity`` policy, a host
may hold at most ``rules["max_server_per_host"]`` (default 1) members of the group.

An instance already on the host (a resize to the same host) always passes, so the
source of a move is not refused because of the instance itself.
"""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

POLICY = "anti-affinity"


class ServerGroupAntiAffinityFilter(BaseFilter):
    reads_instances = True

    def ignores(self, spec: RequestSpec) -> bool:
        group = spec.instance_group
        return not group or group.policy != POLICY

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        group = spec.instance_group
        if not group or group.policy != POLICY:
            return True
        if spec.instance_uuid in host.instances:
            return True
        members_here = host.instances.intersection(group.members)
        limit = group.max_server_per_host
        if len(members_here) >= limit:
            LOG.debug(
                "%s already holds %d member(s) of anti-affinity group %s (max %d)",
                host.host,
                len(members_here),
                group.uuid or "n/a",
                limit,
            )
            return False
        return True
