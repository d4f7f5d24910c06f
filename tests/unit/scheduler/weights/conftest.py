"""In-memory builders for the weigher tests: hosts, aggregates, specs and settings, plus
``rank`` (host names best first through ``weigh_hosts``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pytest

from novaq.settings import Settings
from scheduler.host_state import AggregateInfo, HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights import BaseWeigher, load_weighers, weigh_hosts

_AGGREGATE_IDS = itertools.count(1)
_NODE_IDS = itertools.count(1)

FLAVOR = {"vcpus": 1, "memory_mb": 512, "root_gb": 1, "ephemeral_gb": 0, "swap": 0}


def host(name: str, **overrides: Any) -> HostState:
    """An idle, empty host of 8 vCPUs, 8 GiB of RAM and 100 GB of disk."""
    values: dict[str, Any] = {
        "host": name,
        "nodename": name,
        "compute_node_id": next(_NODE_IDS),
        "vcpus_total": 8,
        "vcpus_used": 0,
        "memory_mb": 8192,
        "memory_mb_used": 0,
        "local_gb": 100,
        "local_gb_used": 0,
        "reserved_vcpus": 0,
        "reserved_memory_mb": 0,
        "reserved_disk_gb": 0,
        "cpu_allocation_ratio": 1.0,
        "ram_allocation_ratio": 1.0,
        "disk_allocation_ratio": 1.0,
    }
    values.update(overrides)
    return HostState(**values)


def aggregate(metadata: dict[str, str], hosts: Iterable[str] = ()) -> AggregateInfo:
    number = next(_AGGREGATE_IDS)
    return AggregateInfo(
        id=number, name=f"agg{number}", hosts=frozenset(hosts), metadata=dict(metadata)
    )


def spec(**overrides: Any) -> RequestSpec:
    values: dict[str, Any] = {"instance_uuid": "inst-new", "flavor": dict(FLAVOR)}
    values.update(overrides)
    return RequestSpec(**values)


def settings(**filter_scheduler: Any) -> Settings:
    """Settings with these ``[filter_scheduler]`` options."""
    return Settings(filter_scheduler=filter_scheduler)


def rank(
    weighers: Sequence[BaseWeigher] | Sequence[str],
    hosts: Sequence[HostState],
    request: RequestSpec | None = None,
    config: Settings | None = None,
) -> list[str]:
    """Host names best first. ``weighers`` are instances, or class names loaded with
    ``config`` (default settings when omitted)."""
    if weighers and isinstance(weighers[0], str):
        loaded = load_weighers(config or settings(), names=[str(w) for w in weighers])
    else:
        loaded = [w for w in weighers if isinstance(w, BaseWeigher)]
    return [h.host for _, h in weigh_hosts(loaded, hosts, request or spec())]


@pytest.fixture
def make_host() -> Callable[..., HostState]:
    return host


@pytest.fixture
def make_aggregate() -> Callable[..., AggregateInfo]:
    return aggregate


@pytest.fixture
def make_spec() -> Callable[..., RequestSpec]:
    return spec


@pytest.fixture
def make_settings() -> Callable[..., Settings]:
    return settings


@pytest.fixture
def ranked() -> Callable[..., list[str]]:
    return rank
