"""AggregateImagePropertiesIsolation: aggregate metadata naming an image property must hold
the image's value (as Nova's image metadata reads it); other keys are ignored."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

NAME = "AggregateImagePropertiesIsolation"
Host = Callable[..., HostState]
Spec = Callable[..., RequestSpec]
MakeFilter = Callable[..., BaseFilter]


def _passes(make_filter: MakeFilter, host: HostState, spec: RequestSpec, **options: object) -> bool:
    return make_filter(NAME, filter_scheduler=options).host_passes(host, spec)


def test_a_host_outside_aggregates_passes(host: Host, spec: Spec, make_filter: MakeFilter) -> None:
    assert _passes(make_filter, host(), spec(image_properties={"os_distro": "debian"}))


def test_the_image_value_must_be_one_of_the_aggregate_s(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    windows = host(aggregates=[{"os_distro": "windows, freebsd"}])
    assert not _passes(make_filter, windows, spec(image_properties={"os_distro": "debian"}))
    assert _passes(make_filter, windows, spec(image_properties={"os_distro": "freebsd"}))


def test_an_image_without_the_property_passes(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    windows = host(aggregates=[{"os_distro": "windows"}])
    assert _passes(make_filter, windows, spec(image_properties={"hw_disk_bus": "ide"}))
    assert _passes(make_filter, windows, spec())


def test_values_compare_after_nova_s_coercion(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    x86 = host(aggregates=[{"hw_architecture": "x86_64"}])
    assert _passes(make_filter, x86, spec(image_properties={"hw_architecture": "amd64"}))
    assert _passes(make_filter, x86, spec(image_properties={"architecture": "AMD64"}))
    agent = host(aggregates=[{"hw_qemu_guest_agent": "True"}])
    assert _passes(make_filter, agent, spec(image_properties={"hw_qemu_guest_agent": "yes"}))
    lower = host(aggregates=[{"hw_qemu_guest_agent": "true"}])
    assert not _passes(make_filter, lower, spec(image_properties={"hw_qemu_guest_agent": "1"}))


def test_false_and_zero_values_check_nothing(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    agg = host(aggregates=[{"hw_qemu_guest_agent": "True", "hw_cpu_cores": "4"}])
    props = {"hw_qemu_guest_agent": "no", "hw_cpu_cores": "0"}
    assert _passes(make_filter, agg, spec(image_properties=props))


def test_keys_that_are_no_image_property_are_ignored(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    # "architecture" is a legacy name, not a field: Nova ignores such a key too.
    odd = host(aggregates=[{"architecture": "aarch64", "ssd": "true", "my_prop": "a"}])
    props = {"architecture": "x86_64", "my_prop": "b"}
    assert _passes(make_filter, odd, spec(image_properties=props))


def test_every_aggregate_of_the_host_counts(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    two = host(aggregates=[{"os_distro": "debian"}, {"os_distro": "ubuntu"}])
    assert _passes(make_filter, two, spec(image_properties={"os_distro": "ubuntu"}))
    clash = host(aggregates=[{"os_distro": "debian"}, {"hw_disk_bus": "ide"}])
    props = {"os_distro": "debian", "hw_disk_bus": "virtio"}
    assert not _passes(make_filter, clash, spec(image_properties=props))


def test_a_namespace_limits_the_keys_checked_to_whole_property_names_under_it(
    host: Host, spec: Spec, make_filter: MakeFilter, caplog: pytest.LogCaptureFixture
) -> None:
    agg = host(aggregates=[{"os_distro": "windows", "hw_disk_bus": "ide", "ns.os_distro": "x"}])
    props = {"os_distro": "debian", "hw_disk_bus": "virtio"}
    with caplog.at_level(logging.WARNING):
        hw = {"aggregate_image_properties_isolation_namespace": "hw"}
        assert not _passes(
            make_filter,
            agg,
            spec(image_properties=props),
            **hw,
            aggregate_image_properties_isolation_separator="_",
        )
    assert "deprecated" in caplog.text
    ns = {"aggregate_image_properties_isolation_namespace": "ns"}
    assert _passes(make_filter, agg, spec(image_properties=props), **ns)


def test_filter_all_keeps_the_hosts_that_pass_in_order(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    hosts = [
        host("a", aggregates=[{"os_distro": "debian"}]),
        host("b", aggregates=[{"os_distro": "ubuntu"}]),
        host("c"),
    ]
    flt = make_filter(NAME)
    kept = flt.filter_all(hosts, spec(image_properties={"os_distro": "debian"}))
    assert [h.host for h in kept] == ["a", "c"]


def test_an_unreadable_image_is_refused_where_a_key_would_be_checked(
    host: Host, spec: Spec, make_filter: MakeFilter
) -> None:
    bad = spec(image_properties={"hw_disk_bus": "floppy-ish", "os_distro": "debian"})
    assert not _passes(make_filter, host(aggregates=[{"os_distro": "debian"}]), bad)
    assert _passes(make_filter, host(aggregates=[{"ssd": "true"}]), bad)
    assert _passes(make_filter, host(), bad)
