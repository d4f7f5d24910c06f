"""The aggregate variants of Nova's filters and AllHostsFilter: AggregateIoOpsFilter,
AggregateNumInstancesFilter (limits an aggregate's metadata overrides, the smallest
winning, the setting when a value is not an integer), AggregateTypeAffinityFilter
(flavors an aggregate's ``instance_type`` names). ``tests/differential`` checks them
against Nova's own classes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


def test_aggregate_io_ops_filter_takes_the_smallest_aggregate_limit(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("AggregateIoOpsFilter")
    busy = {"num_io_ops": 4}
    assert flt.host_passes(host(**busy), spec()) is True  # the setting: 8
    limited = [{"max_io_ops_per_host": "12"}, {"max_io_ops_per_host": "4"}]
    assert flt.host_passes(host(aggregates=limited, **busy), spec()) is False
    assert flt.host_passes(host(aggregates=[{"max_io_ops_per_host": "5"}], **busy), spec())


def test_aggregate_io_ops_filter_falls_back_to_the_setting_on_a_bad_value(
    make_filter: Callable[..., BaseFilter],
    host: HostFactory,
    spec: SpecFactory,
    caplog: pytest.LogCaptureFixture,
) -> None:
    flt = make_filter("AggregateIoOpsFilter")
    bad = [{"max_io_ops_per_host": "eight"}, {"max_io_ops_per_host": "1"}]
    assert flt.host_passes(host(aggregates=bad, num_io_ops=7), spec()) is True
    assert "Could not decode max_io_ops_per_host" in caplog.text


def test_aggregate_num_instances_filter_takes_the_aggregate_limit(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("AggregateNumInstancesFilter")
    assert flt.host_passes(host(num_instances=10), spec()) is True  # the setting: 50
    small = [{"max_instances_per_host": "10"}]
    assert flt.host_passes(host(aggregates=small, num_instances=10), spec()) is False
    assert flt.host_passes(host(aggregates=small, num_instances=9), spec()) is True


def test_aggregate_type_affinity_filter_takes_only_the_named_flavors(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("AggregateTypeAffinityFilter")
    request = spec()
    name = request.flavor.name
    assert flt.host_passes(host(), request) is True  # no instance_type: any flavor
    assert flt.host_passes(host(aggregates=[{"instance_type": f"m1, {name}"}]), request)
    assert not flt.host_passes(host(aggregates=[{"instance_type": "m1,large"}]), request)
    either = [{"instance_type": "m1"}, {"instance_type": name}]
    assert flt.host_passes(host(aggregates=either), request) is True


def test_all_hosts_filter_passes_every_host(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("AllHostsFilter")
    assert flt.host_passes(host(service_disabled=True), spec()) is True
    assert flt.filter_all([host(), host("host2")], spec()) == [host(), host("host2")]
