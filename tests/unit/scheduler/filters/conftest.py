"""In-memory host states, request specs and configured filters for the filter tests.

``host(**overrides)`` builds a HostState of 8 vCPUs, 8 GB of RAM (512 MB reserved and
used) and 100 GB of disk, enabled and up; ``aggregates=[{...}, ...]`` is a shortcut that
turns metadata dicts into aggregates. ``spec(**overrides)`` builds a RequestSpec for a
1 vCPU / 512 MB / 1 GB flavor; ``extra_specs`` and the flavor's sizes can be given
directly. ``make_filter(name, **settings)`` loads one filter by its registry name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pytest

from novaq.settings import Settings
from scheduler.filters import BaseFilter, load_filters
from scheduler.host_state import AggregateInfo, HostState
from scheduler.request_spec import RequestSpec
from tests.factories import flavor_dict

INSTANCE_UUID = "00000000-0000-4000-8000-000000000001"
FLAVOR_KEYS = ("vcpus", "memory_mb", "root_gb", "ephemeral_gb", "swap", "extra_specs")


def build_host(
    name: str = "host1",
    aggregates: Iterable[Mapping[str, str]] = (),
    **overrides: Any,
) -> HostState:
    values: dict[str, Any] = {
        "host": name,
        "nodename": name,
        "compute_node_id": 1,
        "vcpus_total": 8,
        "vcpus_used": 0,
        "memory_mb": 8192,
        "memory_mb_used": 512,
        "local_gb": 100,
        "local_gb_used": 0,
        "reserved_vcpus": 0,
        "reserved_memory_mb": 512,
        "reserved_disk_gb": 0,
        "cpu_allocation_ratio": 4.0,
        "ram_allocation_ratio": 1.0,
        "disk_allocation_ratio": 1.0,
        "aggregates": tuple(
            AggregateInfo(i, f"agg{i}", frozenset({name}), dict(metadata))
            for i, metadata in enumerate(aggregates, start=1)
        ),
    }
    values.update(overrides)
    return HostState(**values)


def build_spec(**overrides: Any) -> RequestSpec:
    flavor_args = {k: overrides.pop(k) for k in FLAVOR_KEYS if k in overrides}
    overrides.setdefault("instance_uuid", INSTANCE_UUID)
    overrides.setdefault("flavor", flavor_dict(**flavor_args))
    return RequestSpec(**overrides)


def build_filter(name: str, **settings: Any) -> BaseFilter:
    (flt,) = load_filters(Settings(**settings), [name])
    return flt


@pytest.fixture
def host() -> Callable[..., HostState]:
    return build_host


@pytest.fixture
def spec() -> Callable[..., RequestSpec]:
    return build_spec


@pytest.fixture
def make_filter() -> Callable[..., BaseFilter]:
    return build_filter
