from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.host_state import HostState
from scheduler.weights.affinity import (
    ServerGroupSoftAffinityWeigher,
    ServerGroupSoftAntiAffinityWeigher,
)

Host = Callable[..., HostState]


def _group(policy: str) -> dict[str, object]:
    return {"uuid": "g1", "name": "g", "policy": policy, "rules": {}, "members": ["m1", "m2", "m3"]}


@pytest.fixture
def hosts(make_host: Host) -> list[HostState]:
    return [
        make_host("one", instances={"m1", "other"}),
        make_host("none", instances={"other"}),
        make_host("two", instances={"m2", "m3"}),
    ]


def test_raw_values_count_group_members_on_the_host(hosts, make_spec, make_settings) -> None:
    affinity = ServerGroupSoftAffinityWeigher(make_settings())
    anti = ServerGroupSoftAntiAffinityWeigher(make_settings())
    soft = make_spec(instance_group=_group("soft-affinity"))
    soft_anti = make_spec(instance_group=_group("soft-anti-affinity"))
    assert [affinity.weigh(h, soft) for h in hosts] == [1.0, 0.0, 2.0]
    assert [anti.weigh(h, soft_anti) for h in hosts] == [-1.0, 0.0, -2.0]
    for weigher in (affinity, anti):
        assert weigher.minval is None and weigher.maxval is None


@pytest.mark.parametrize(
    "group", [None, _group("affinity"), _group("anti-affinity"), {"policy": "soft-affinity"}]
)
def test_other_policies_or_no_group_weigh_zero(hosts, make_spec, make_settings, group) -> None:
    request = make_spec(instance_group=group)
    affinity = ServerGroupSoftAffinityWeigher(make_settings())
    anti = ServerGroupSoftAntiAffinityWeigher(make_settings())
    assert [affinity.weigh(h, request) for h in hosts] == [0.0, 0.0, 0.0]
    assert [anti.weigh(h, request) for h in hosts] == [0.0, 0.0, 0.0]


def test_soft_affinity_prefers_hosts_with_more_members(hosts, make_spec, ranked) -> None:
    request = make_spec(instance_group=_group("soft-affinity"))
    names = ["ServerGroupSoftAffinityWeigher", "ServerGroupSoftAntiAffinityWeigher"]
    assert ranked(names, hosts, request) == ["two", "one", "none"]


def test_soft_anti_affinity_prefers_hosts_with_fewer_members(hosts, make_spec, ranked) -> None:
    request = make_spec(instance_group=_group("soft-anti-affinity"))
    names = ["ServerGroupSoftAffinityWeigher", "ServerGroupSoftAntiAffinityWeigher"]
    assert ranked(names, hosts, request) == ["none", "one", "two"]


def test_multiplier_options(make_host: Host, make_settings) -> None:
    config = make_settings(
        soft_affinity_weight_multiplier=3.0, soft_anti_affinity_weight_multiplier=5.0
    )
    host = make_host("h")
    assert ServerGroupSoftAffinityWeigher(config).multiplier(host) == 3.0
    assert ServerGroupSoftAntiAffinityWeigher(config).multiplier(host) == 5.0
