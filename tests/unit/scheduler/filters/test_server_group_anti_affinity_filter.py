"""ServerGroupAntiAffinityFilter: at most max_server_per_host members of an anti-affinity
group on one host (default 1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]
MEMBER_A, MEMBER_B, STRANGER = "member-a", "member-b", "not-a-member"


def _group(policy: str = "anti-affinity", **rules: int) -> dict[str, Any]:
    return {
        "uuid": "group-1",
        "name": "web",
        "policy": policy,
        "rules": rules,
        "members": [MEMBER_A, MEMBER_B],
        "hosts": ["host1"],
    }


@pytest.fixture
def anti(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("ServerGroupAntiAffinityFilter")


def test_anti_affinity_passes_any_host_without_a_group(
    anti: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert anti.host_passes(host(instances={MEMBER_A}), spec()) is True


def test_anti_affinity_ignores_groups_of_other_policies(
    anti: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(instance_group=_group("affinity"))
    assert anti.host_passes(host(instances={MEMBER_A}), request) is True


def test_anti_affinity_rejects_a_host_that_already_holds_a_member(
    anti: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(instance_group=_group())
    assert anti.host_passes(host(instances={MEMBER_A}), request) is False


def test_anti_affinity_passes_a_host_holding_only_non_members(
    anti: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(instance_group=_group())
    assert anti.host_passes(host(instances={STRANGER}), request) is True


def test_anti_affinity_allows_up_to_max_server_per_host_members(
    anti: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(instance_group=_group(max_server_per_host=2))
    assert anti.host_passes(host(instances=set()), request) is True
    assert anti.host_passes(host(instances={MEMBER_A, STRANGER}), request) is True
    assert anti.host_passes(host(instances={MEMBER_A, MEMBER_B}), request) is False


def test_anti_affinity_passes_the_host_already_running_the_instance_itself(
    anti: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(instance_uuid=MEMBER_A, instance_group=_group())
    assert anti.host_passes(host(instances={MEMBER_A, MEMBER_B}), request) is True


def test_anti_affinity_runs_for_every_instance_of_a_request(anti: BaseFilter) -> None:
    assert anti.run_filter_once_per_request is False
