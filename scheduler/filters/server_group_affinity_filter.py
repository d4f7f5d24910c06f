"""ServerGroupAffinityFilter: for a group with the ``affinity`` policy that already has
members placed, only the hosts of those members pass; an empty group passes everywhere."""

from __future__ import annotations

import logging

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

POLICY = "affinity"


class ServerGroupAffinityFilter(BaseFilter):
    def ignores(self, spec: RequestSpec) -> bool:
        group = spec.instance_group
        return not group or group.policy != POLICY or not group.hosts

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        group = spec.instance_group
        if not group or group.policy != POLICY:
            return True
        group_hosts = group.hosts
        if group_hosts and host.host not in group_hosts:
            LOG.debug(
                "%s is not among the hosts %s of affinity group %s",
                host.host,
                list(group_hosts),
                group.uuid or "n/a",
            )
            return False
        return True
