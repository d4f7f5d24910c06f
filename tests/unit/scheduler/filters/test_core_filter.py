"""CoreFilter: free vCPUs are (total - reserved) * cpu_allocation_ratio - (used - reserved)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


@pytest.fixture
def core(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("CoreFilter")


def test_core_filter_passes_a_request_that_fills_the_overcommitted_host_exactly(
    core: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # 8 vCPUs * 4.0 = 32, 28 used.
    assert core.host_passes(host(vcpus_used=28), spec(vcpus=4)) is True
    assert core.host_passes(host(vcpus_used=29), spec(vcpus=4)) is False


def test_core_filter_honours_a_lower_allocation_ratio(
    core: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert core.host_passes(host(cpu_allocation_ratio=1.0), spec(vcpus=8)) is True
    assert core.host_passes(host(cpu_allocation_ratio=1.0), spec(vcpus=9)) is False


def test_core_filter_does_not_overcommit_reserved_vcpus(
    core: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # (8 - 2) * 4.0 = 24; the 2 reserved are counted in used, 17 are allocated: 7 free.
    reserved = host(reserved_vcpus=2, vcpus_used=2 + 17)
    assert core.host_passes(reserved, spec(vcpus=7)) is True
    assert core.host_passes(reserved, spec(vcpus=8)) is False


def test_core_filter_refuses_more_vcpus_than_the_host_has_whatever_the_ratio(
    core: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # Placement's max_unit: 24 vCPUs fit (8 * 4.0) but no one server gets more than 8.
    empty = host()
    assert core.host_passes(empty, spec(vcpus=8)) is True
    assert core.host_passes(empty, spec(vcpus=9)) is False
    assert core.filter_all([empty], spec(vcpus=9)) == []


def test_core_filter_rejects_an_overcommitted_host(
    core: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert core.host_passes(host(vcpus_used=40), spec(vcpus=1)) is False


def test_core_filter_runs_for_every_instance_of_a_request(core: BaseFilter) -> None:
    assert core.run_filter_once_per_request is False
