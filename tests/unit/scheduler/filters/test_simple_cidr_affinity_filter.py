"""SimpleCIDRAffinityFilter: with build_near_host_ip (and cidr, default /24), only hosts
whose host_ip is in that network."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]


@pytest.fixture
def near(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("SimpleCIDRAffinityFilter")


def _hints(address: str, cidr: str | None = None) -> dict[str, list[str]]:
    hints = {"build_near_host_ip": [address]}
    if cidr is not None:
        hints["cidr"] = [cidr]
    return hints


def test_the_filter_passes_every_host_without_the_hint(
    near: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert near.ignores(spec()) is True
    assert near.host_passes(host(host_ip_text="10.0.0.5"), spec(hints={"cidr": ["/8"]})) is True
    assert near.host_passes(host(), spec(hints={"build_near_host_ip": [""]})) is True


def test_the_default_network_is_the_address_s_slash_24(
    near: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(hints=_hints("10.0.0.1"))
    assert near.ignores(request) is False
    assert near.host_passes(host(host_ip_text="10.0.0.254"), request) is True
    assert near.host_passes(host(host_ip_text="10.0.1.1"), request) is False


@pytest.mark.parametrize(
    ("cidr", "inside", "outside"),
    [
        ("/30", "10.0.0.3", "10.0.0.4"),
        ("/16", "10.0.200.1", "10.1.0.1"),
        ("/255.255.255.252", "10.0.0.2", "10.0.0.5"),  # a netmask
        ("/0.0.0.255", "10.0.0.99", "10.0.1.1"),  # a hostmask, as netaddr reads it
        ("/024", "10.0.0.99", "10.0.1.1"),  # a prefix with a leading zero
        ("/0", "192.168.1.1", "2001:db8::1"),  # another IP version is never inside
    ],
)
def test_cidr_is_a_prefix_length_a_netmask_or_a_hostmask(
    near: BaseFilter, host: HostFactory, spec: SpecFactory, cidr: str, inside: str, outside: str
) -> None:
    request = spec(hints=_hints("10.0.0.1", cidr))
    assert near.host_passes(host(host_ip_text=inside), request) is True
    assert near.host_passes(host(host_ip_text=outside), request) is False


def test_ipv6_networks_take_a_prefix_or_a_netmask(
    near: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    for cidr in ("/32", "/ffff:ffff::"):
        request = spec(hints=_hints("2001:db8::1", cidr))
        assert near.host_passes(host(host_ip_text="2001:db8:ff::7"), request) is True
        assert near.host_passes(host(host_ip_text="2001:db9::1"), request) is False
        assert near.host_passes(host(host_ip_text="10.0.0.1"), request) is False


@pytest.mark.parametrize("cidr", ["/33", "/255.0.255.0", "/1.2", "/", "24", "/ffff::"])
def test_a_cidr_with_no_network_refuses_the_host_where_nova_s_filter_raises(
    near: BaseFilter, host: HostFactory, spec: SpecFactory, cidr: str
) -> None:
    assert (
        near.host_passes(host(host_ip_text="10.0.0.1"), spec(hints=_hints("10.0.0.1", cidr)))
        is False
    )


def test_a_host_that_has_not_recorded_its_address_is_refused(
    near: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert near.host_passes(host(host_ip_text=None), spec(hints=_hints("10.0.0.1"))) is False


def test_the_filter_runs_once_per_request(near: BaseFilter) -> None:
    assert near.run_filter_once_per_request is True
