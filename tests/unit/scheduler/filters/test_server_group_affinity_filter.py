"""ServerGroupAffinityFilter: once an affinity group has members placed, only their hosts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


def _group(hosts: list[str], policy: str = "affinity") -> dict[str, Any]:
    return {"uuid": "group-1", "policy": policy, "rules": {}, "members": [], "hosts": hosts}


@pytest.fixture
def affinity(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("ServerGroupAffinityFilter")


def test_affinity_passes_any_host_without_a_group(
    affinity: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert affinity.host_passes(host(), spec()) is True


def test_affinity_passes_any_host_while_the_group_has_no_hosts(
    affinity: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert affinity.host_passes(host("host2"), spec(instance_group=_group([]))) is True


def test_affinity_passes_only_the_hosts_of_the_group(
    affinity: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(instance_group=_group(["host1"]))
    assert affinity.host_passes(host("host1"), request) is True
    assert affinity.host_passes(host("host2"), request) is False


def test_affinity_ignores_groups_of_other_policies(
    affinity: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(instance_group=_group(["host1"], policy="anti-affinity"))
    assert affinity.host_passes(host("host2"), request) is True


def test_affinity_runs_for_every_instance_of_a_request(affinity: BaseFilter) -> None:
    assert affinity.run_filter_once_per_request is False
