"""AvailabilityZoneFilter: a requested zone must be the host's (aggregate or default) zone."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


@pytest.fixture
def az(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("AvailabilityZoneFilter")


def test_az_filter_passes_every_host_when_no_zone_is_requested(
    az: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert az.host_passes(host(availability_zone="az1"), spec()) is True
    assert az.host_passes(host(availability_zone="az1"), spec(availability_zone="")) is True


def test_az_filter_passes_a_host_in_the_requested_zone(
    az: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert az.host_passes(host(availability_zone="az1"), spec(availability_zone="az1")) is True


def test_az_filter_rejects_a_host_in_another_zone(
    az: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert az.host_passes(host(availability_zone="az2"), spec(availability_zone="az1")) is False


def test_az_filter_puts_a_host_without_zone_aggregate_in_the_default_zone(
    az: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # HostState's availability_zone defaults to default_availability_zone ("nova").
    assert az.host_passes(host(), spec(availability_zone="nova")) is True
    assert az.host_passes(host(), spec(availability_zone="az1")) is False


def test_az_filter_passes_a_host_in_several_zones_for_each_of_them(
    az: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    both = host(
        availability_zone="az1,az2",
        aggregates=[{"availability_zone": "az1"}, {"availability_zone": "az2"}],
    )
    assert az.host_passes(both, spec(availability_zone="az1")) is True
    assert az.host_passes(both, spec(availability_zone="az2")) is True
    assert az.host_passes(both, spec(availability_zone="az3")) is False


def test_az_filter_takes_a_zone_named_with_a_comma_as_one_zone(
    az: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    # Nova 34 maps a zone to aggregates by their whole metadata value.
    one = host(availability_zone="az1,az2", aggregates=[{"availability_zone": "az1,az2"}])
    assert az.host_passes(one, spec(availability_zone="az1,az2")) is True
    assert az.host_passes(one, spec(availability_zone="az1")) is False


def test_az_filter_runs_once_per_request(az: BaseFilter) -> None:
    assert az.run_filter_once_per_request is True
