"""ComputeFilter: only enabled compute services that are up (NOVA_BEHAVIOUR §7.3)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from compute.servicegroup import is_up
from models import Service
from novaq.settings import Settings
from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]
NOW = dt.datetime(2025, 1, 1, 12, 0, 0)


def _service(**overrides: object) -> Service:
    values: dict[str, object] = {
        "host": "host1",
        "binary": "novaq-compute",
        "disabled": False,
        "forced_down": False,
        "last_seen_up": NOW,
        "created_at": NOW,
    }
    values.update(overrides)
    return Service(**values)


def test_compute_filter_passes_an_enabled_host_that_is_up(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    assert make_filter("ComputeFilter").host_passes(host(), spec()) is True


def test_compute_filter_rejects_a_disabled_host_even_when_up(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    assert make_filter("ComputeFilter").host_passes(host(service_disabled=True), spec()) is False


def test_compute_filter_rejects_a_host_that_is_down(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    assert make_filter("ComputeFilter").host_passes(host(service_up=False), spec()) is False


def test_compute_filter_rejects_a_host_whose_heartbeat_is_older_than_service_down_time(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    settings = Settings(service_down_time=60)
    stale = _service(last_seen_up=NOW - dt.timedelta(seconds=61))
    fresh = _service(last_seen_up=NOW - dt.timedelta(seconds=59))
    flt = make_filter("ComputeFilter")
    assert flt.host_passes(host(service_up=is_up(stale, settings, NOW)), spec()) is False
    assert flt.host_passes(host(service_up=is_up(fresh, settings, NOW)), spec()) is True


def test_compute_filter_rejects_a_forced_down_host_with_a_fresh_heartbeat(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    forced = _service(forced_down=True)
    up = is_up(forced, Settings(), NOW)
    assert make_filter("ComputeFilter").host_passes(host(service_up=up), spec()) is False


def test_compute_filter_runs_once_per_request(make_filter: Callable[..., BaseFilter]) -> None:
    assert make_filter("ComputeFilter").run_filter_once_per_request is True
