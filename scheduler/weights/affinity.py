"""Soft (anti-)affinity weighers for server groups: the raw value is how many members of
the request's group are already on the host, when the group's policy is the weigher's
(0 otherwise, or without a group). Soft affinity prefers hosts with more members; soft
anti-affinity negates the count, so hosts with fewer members win. Both multipliers must
not be negative."""

from __future__ import annotations

from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class _SoftAffinityWeigherBase(BaseWeigher):
    policy: ClassVar[str]

    def members_on_host(self, host: HostState, spec: RequestSpec) -> int:
        group = spec.instance_group
        if not group or group.policy != self.policy:
            return 0
        return len(host.instances.intersection(group.members))


class ServerGroupSoftAffinityWeigher(_SoftAffinityWeigherBase):
    policy: ClassVar[str] = "soft-affinity"
    option: ClassVar[str] = "soft_affinity_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return float(self.members_on_host(host, spec))


class ServerGroupSoftAntiAffinityWeigher(_SoftAffinityWeigherBase):
    policy: ClassVar[str] = "soft-anti-affinity"
    option: ClassVar[str] = "soft_anti_affinity_weight_multiplier"

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return -float(self.members_on_host(host, spec))
