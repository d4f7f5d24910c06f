"""DiskFilter: the flavor's root + ephemeral + swap (rounded up to GB) against
(total - reserved) * disk_allocation_ratio - (used - reserved)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


@pytest.fixture
def disk(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("DiskFilter")


def test_disk_filter_passes_a_request_for_exactly_the_free_disk(
    disk: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert disk.host_passes(host(local_gb_used=60), spec(root_gb=40)) is True
    assert disk.host_passes(host(local_gb_used=61), spec(root_gb=40)) is False


def test_disk_filter_counts_ephemeral_disk_and_swap_rounded_up_to_a_gb(
    disk: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # 90 + 8 + ceil(1 MB / 1024) = 99 GB.
    request = spec(root_gb=90, ephemeral_gb=8, swap=1)
    assert disk.host_passes(host(local_gb_used=1), request) is True
    assert disk.host_passes(host(local_gb_used=2), request) is False


def test_disk_filter_overcommits_by_the_allocation_ratio(
    disk: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # 100 * 2.0 = 200 GB, 150 of them allocated: 50 free (without the ratio: none).
    overcommitted = host(disk_allocation_ratio=2.0, local_gb_used=150)
    assert disk.host_passes(overcommitted, spec(root_gb=50)) is True
    assert disk.host_passes(overcommitted, spec(root_gb=51)) is False


def test_disk_filter_refuses_more_disk_than_the_host_has_whatever_the_ratio(
    disk: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # Placement's max_unit: 200 GB fit (100 * 2.0) but no one server gets more than 100.
    roomy = host(disk_allocation_ratio=2.0)
    assert disk.host_passes(roomy, spec(root_gb=100)) is True
    assert disk.host_passes(roomy, spec(root_gb=101)) is False
    assert disk.filter_all([roomy], spec(root_gb=101)) == []


def test_a_flavor_without_disk_is_not_checked_for_disk(
    disk: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # Nova leaves DISK_GB out of a root_gb=0 flavor's request (boot from volume): a host
    # overcommitted past its disk capacity still takes it.
    overcommitted = host(local_gb_used=140)
    assert overcommitted.free_disk_capacity_gb < 0
    assert disk.ignores(spec(root_gb=0)) is True
    assert disk.host_passes(overcommitted, spec(root_gb=0)) is True
    assert disk.host_passes(overcommitted, spec(root_gb=1)) is False


def test_disk_filter_never_hands_out_reserved_disk(
    disk: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    reserved = host(reserved_disk_gb=10, local_gb_used=10)
    assert disk.host_passes(reserved, spec(root_gb=90)) is True
    assert disk.host_passes(reserved, spec(root_gb=91)) is False
