"""Loading filters by name from settings, and running them in order (Nova's handler)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from novaq.exceptions import ConfigError
from novaq.settings import Settings
from scheduler.filters import _registry, load_filters, run_filters
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]

# Nova's run_filter_once_per_request, per NOVA_BEHAVIOUR §4.2 ("Once").
ONCE_PER_REQUEST = {
    "ComputeFilter": True,
    "ComputeCapabilitiesFilter": True,
    "ImagePropertiesFilter": True,
    "ServerGroupAntiAffinityFilter": False,
    "ServerGroupAffinityFilter": False,
    "AvailabilityZoneFilter": True,
    "AggregateInstanceExtraSpecsFilter": True,
    "SameHostFilter": True,
    "DifferentHostFilter": True,
    "IsolatedHostsFilter": True,
    "NumInstancesFilter": False,
    "IoOpsFilter": False,
    "CoreFilter": False,
    "RamFilter": False,
    "DiskFilter": False,
    "PciPassthroughFilter": False,
    "AggregateIoOpsFilter": False,
    "AggregateNumInstancesFilter": False,
    "AggregateTypeAffinityFilter": True,
    "AllHostsFilter": True,
    "AggregateMultiTenancyIsolation": True,
    "MetricsFilter": False,
    "SimpleCIDRAffinityFilter": True,
    "JsonFilter": False,
    "AggregateImagePropertiesIsolation": True,
}


def test_every_default_enabled_filter_loads_in_the_configured_order() -> None:
    settings = Settings()
    names = settings.filter_scheduler.enabled_filters
    filters = load_filters(settings, names)
    assert [type(f).__name__ for f in filters] == list(names)
    assert all(f.settings is settings for f in filters)


def test_every_registered_filter_is_keyed_by_its_class_name_and_loads() -> None:
    registry = _registry()
    assert set(registry) == set(ONCE_PER_REQUEST)
    assert all(name == cls.__name__ for name, cls in registry.items())
    assert len(load_filters(Settings(), list(registry))) == len(registry)


@pytest.mark.parametrize(("name", "once"), sorted(ONCE_PER_REQUEST.items()))
def test_filters_run_once_per_request_as_nova_s_do(name: str, once: bool) -> None:
    assert _registry()[name].run_filter_once_per_request is once


def test_an_unknown_filter_name_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="NoSuchFilter") as excinfo:
        load_filters(Settings(), ["ComputeFilter", "NoSuchFilter"])
    assert "[filter_scheduler] enabled_filters" in str(excinfo.value)
    assert "unknown filter(s) NoSuchFilter;" in str(excinfo.value)


def test_run_filters_reports_each_filter_with_hosts_before_and_after(
    host: HostFactory, spec: SpecFactory
) -> None:
    filters = load_filters(Settings(), ["ComputeFilter", "RamFilter"])
    hosts = [host("a"), host("b", service_disabled=True), host("c", memory_mb_used=8000)]
    passing, report = run_filters(filters, hosts, spec(memory_mb=1024))
    assert [h.host for h in passing] == ["a"]
    assert [str(step) for step in report] == ["ComputeFilter: 3 -> 2", "RamFilter: 2 -> 1"]


def test_run_filters_stops_at_the_first_filter_that_leaves_no_host(
    host: HostFactory, spec: SpecFactory, caplog: pytest.LogCaptureFixture
) -> None:
    filters = load_filters(Settings(), ["ComputeFilter", "RamFilter", "DiskFilter"])
    hosts = [host("a", memory_mb_used=8000), host("b", service_up=False)]
    with caplog.at_level(logging.INFO, logger="scheduler.filters"):
        passing, report = run_filters(filters, hosts, spec(memory_mb=1024))
    assert passing == []
    assert [str(step) for step in report] == ["ComputeFilter: 2 -> 1", "RamFilter: 1 -> 0"]
    assert "RamFilter returned 0 hosts" in caplog.text


# One refusing case per filter: (name, host overrides, spec overrides, settings).
REFUSALS: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ("ComputeFilter", {"service_disabled": True}, {}, {}),
    ("ComputeCapabilitiesFilter", {}, {"extra_specs": {"capabilities:cpu_info:arch": "x"}}, {}),
    ("ImagePropertiesFilter", {}, {"image_properties": {"hw_architecture": "x86_64"}}, {}),
    (
        "ServerGroupAntiAffinityFilter",
        {"instances": {"m1"}},
        {"instance_group": {"policy": "anti-affinity", "members": ["m1"]}},
        {},
    ),
    (
        "ServerGroupAffinityFilter",
        {},
        {"instance_group": {"policy": "affinity", "hosts": ["elsewhere"]}},
        {},
    ),
    ("AvailabilityZoneFilter", {}, {"availability_zone": "az9"}, {}),
    ("AggregateInstanceExtraSpecsFilter", {}, {"extra_specs": {"ssd": "true"}}, {}),
    ("SameHostFilter", {}, {"hints": {"same_host": "vm-1"}}, {}),
    ("DifferentHostFilter", {"instances": {"vm-1"}}, {"hints": {"different_host": "vm-1"}}, {}),
    ("IsolatedHostsFilter", {}, {}, {"filter_scheduler": {"isolated_hosts": ["host1"]}}),
    ("NumInstancesFilter", {"num_instances": 50}, {}, {}),
    ("IoOpsFilter", {"num_io_ops": 8}, {}, {}),
    ("CoreFilter", {}, {"vcpus": 64}, {}),
    ("RamFilter", {}, {"memory_mb": 65536}, {}),
    ("DiskFilter", {}, {"root_gb": 1000}, {}),
]


@pytest.mark.parametrize(
    ("name", "host_overrides", "spec_overrides", "settings"),
    REFUSALS,
    ids=[case[0] for case in REFUSALS],
)
def test_every_filter_logs_why_it_refuses_a_host_at_debug(
    host: HostFactory,
    spec: SpecFactory,
    caplog: pytest.LogCaptureFixture,
    name: str,
    host_overrides: dict[str, Any],
    spec_overrides: dict[str, Any],
    settings: dict[str, Any],
) -> None:
    (flt,) = load_filters(Settings(**settings), [name])
    with caplog.at_level(logging.DEBUG, logger="scheduler.filters"):
        assert flt.host_passes(host(**host_overrides), spec(**spec_overrides)) is False
    records = [r for r in caplog.records if r.name.startswith("scheduler.filters.")]
    assert records, f"{name} refused silently"
    assert all(r.levelno == logging.DEBUG for r in records)
    assert any("host1" in r.getMessage() for r in records)
