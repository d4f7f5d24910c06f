"""Soft (anti-)affinity weighers for server groups: the raw value is how many members of
the request's group are already on the host, when the group's policy is the weigher's
(0 otherwise, or without a group). Soft affinity prefers hosts with more members; soft
anti-affinity negates the count, so hosts with fewer members win. Both multipliers must
not be negative."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights.base import BaseWeigher


class _SoftAffinityWeigherBase(BaseWeigher):
    policy: ClassVar[str]
    reads_instances: ClassVar[bool] = True
    #: +1 prefers hosts with more members, -1 hosts with fewer.
    sign: ClassVar[float]

    def ignores(self, spec: RequestSpec) -> bool:
        group = spec.instance_group
        return not group or group.policy != self.policy

    def members_on_host(self, host: HostState, spec: RequestSpec) -> int:
        group = spec.instance_group
        if not group or group.policy != self.policy:
            return 0
        return len(host.instances.intersection(group.members))

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        return self.sign * float(self.members_on_host(host, spec))

    def weigh_all(self, hosts: Sequence[HostState], spec: RequestSpec) -> list[float]:
        group = spec.instance_group
        if not group or group.policy != self.policy:
            return [self.sign * 0.0] * len(hosts)
        members, sign = group.members, self.sign
        return [sign * float(len(h.instances.intersection(members))) for h in hosts]


class ServerGroupSoftAffinityWeigher(_SoftAffinityWeigherBase):
    policy: ClassVar[str] = "soft-affinity"
    option: ClassVar[str] = "soft_affinity_weight_multiplier"
    sign: ClassVar[float] = 1.0


class ServerGroupSoftAntiAffinityWeigher(_SoftAffinityWeigherBase):
    policy: ClassVar[str] = "soft-anti-affinity"
    option: ClassVar[str] = "soft_anti_affinity_weight_multiplier"
    sign: ClassVar[float] = -1.0
