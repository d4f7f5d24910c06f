"""NumInstancesFilter: fewer than max_instances_per_host instances on the host."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


def test_num_instances_filter_passes_a_host_below_the_limit(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("NumInstancesFilter", filter_scheduler={"max_instances_per_host": 3})
    assert flt.host_passes(host(num_instances=2), spec()) is True


def test_num_instances_filter_rejects_a_host_at_the_limit(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("NumInstancesFilter", filter_scheduler={"max_instances_per_host": 3})
    assert flt.host_passes(host(num_instances=3), spec()) is False
    assert flt.host_passes(host(num_instances=4), spec()) is False


def test_num_instances_filter_defaults_to_nova_limit_of_fifty(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("NumInstancesFilter")
    assert flt.host_passes(host(num_instances=49), spec()) is True
    assert flt.host_passes(host(num_instances=50), spec()) is False


def test_num_instances_filter_sees_instances_consumed_earlier_in_the_request(
    make_filter: Callable[..., BaseFilter], host: HostFactory, spec: SpecFactory
) -> None:
    flt = make_filter("NumInstancesFilter", filter_scheduler={"max_instances_per_host": 1})
    state = host(num_instances=0)
    request = spec()
    assert flt.host_passes(state, request) is True
    state.consume(request.resources, request.instance_uuid)
    assert flt.host_passes(state, request) is False
    assert flt.run_filter_once_per_request is False
