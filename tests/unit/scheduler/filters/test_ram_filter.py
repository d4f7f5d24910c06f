"""RamFilter: free RAM is (total - reserved) * ram_allocation_ratio - (used - reserved)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


@pytest.fixture
def ram(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("RamFilter")


def test_ram_filter_passes_a_request_for_exactly_the_free_memory(
    ram: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # 8192 MB, 512 reserved (and so used): 7680 MB free.
    assert ram.host_passes(host(), spec(memory_mb=7680)) is True


def test_ram_filter_rejects_host_below_requested_memory(
    ram: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert ram.host_passes(host(), spec(memory_mb=7681)) is False
    assert ram.host_passes(host(memory_mb_used=512 + 4000), spec(memory_mb=4096)) is False


def test_ram_filter_overcommits_by_the_allocation_ratio(
    ram: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # (8192 - 512) * 1.5 = 11520 MB, 8000 of them allocated: 3520 free.
    overcommitted = host(ram_allocation_ratio=1.5, memory_mb_used=512 + 8000)
    assert ram.host_passes(overcommitted, spec(memory_mb=3520)) is True
    assert ram.host_passes(overcommitted, spec(memory_mb=3521)) is False


def test_ram_filter_refuses_more_memory_than_the_host_has_whatever_the_ratio(
    ram: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # Placement's max_unit: one server never gets more than the host's 8192 MB.
    roomy = host(ram_allocation_ratio=4.0)
    assert ram.host_passes(roomy, spec(memory_mb=8192)) is True
    assert ram.host_passes(roomy, spec(memory_mb=8193)) is False


def test_ram_filter_never_hands_out_reserved_memory(
    ram: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    reserved = host(reserved_memory_mb=2048, memory_mb_used=2048)
    assert ram.host_passes(reserved, spec(memory_mb=6144)) is True
    assert ram.host_passes(reserved, spec(memory_mb=6145)) is False


def test_ram_filter_does_not_overcommit_the_reserved_part_with_the_ratio(
    ram: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # (8192 - 2048) * 2.0 = 12288, not 8192 * 2.0 - 2048; 6000 allocated: 6288 free.
    reserved = host(reserved_memory_mb=2048, memory_mb_used=2048 + 6000, ram_allocation_ratio=2.0)
    assert ram.host_passes(reserved, spec(memory_mb=6288)) is True
    assert ram.host_passes(reserved, spec(memory_mb=6289)) is False
