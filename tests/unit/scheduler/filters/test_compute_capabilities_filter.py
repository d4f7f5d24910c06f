"""ComputeCapabilitiesFilter: flavor extra specs against host attributes, stats and
cpu_info, with Nova's scoping rules and extra-spec operators."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]
CPU_INFO = {"arch": "x86_64", "features": ["aes", "avx2"], "topology": {"sockets": 2}}


@pytest.fixture
def caps(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("ComputeCapabilitiesFilter")


def test_capabilities_filter_passes_a_flavor_without_extra_specs(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert caps.host_passes(host(), spec()) is True


def test_capabilities_filter_checks_an_unscoped_key_naming_a_host_attribute(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(extra_specs={"hypervisor_type": "s== QEMU"})
    assert caps.host_passes(host(hypervisor_type="QEMU"), request) is True
    assert caps.host_passes(host(hypervisor_type="Xen"), request) is False


def test_capabilities_filter_ignores_an_unscoped_key_the_host_does_not_have(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert caps.host_passes(host(), spec(extra_specs={"ssd": "true"})) is True


def test_capabilities_filter_checks_an_unscoped_key_found_in_stats(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(extra_specs={"gpu_model": "<or> m4000 <or> m6000"})
    assert caps.host_passes(host(stats={"gpu_model": "m6000"}), request) is True
    assert caps.host_passes(host(stats={"gpu_model": "k80"}), request) is False


def test_capabilities_filter_compares_numeric_attributes_with_numeric_operators(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(extra_specs={"capabilities:vcpus_total": ">= 16"})
    assert caps.host_passes(host(vcpus_total=16), request) is True
    assert caps.host_passes(host(vcpus_total=8), request) is False


def test_capabilities_filter_walks_cpu_info_for_a_scoped_key(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    cpu = host(cpu_info=CPU_INFO)
    assert caps.host_passes(cpu, spec(extra_specs={"capabilities:cpu_info:arch": "x86_64"}))
    assert caps.host_passes(cpu, spec(extra_specs={"capabilities:cpu_info:topology:sockets": "2"}))
    assert not caps.host_passes(cpu, spec(extra_specs={"capabilities:cpu_info:arch": "aarch64"}))


def test_capabilities_filter_matches_cpu_features_with_in_operators(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    cpu = host(cpu_info=CPU_INFO)
    key = "capabilities:cpu_info:features"
    assert caps.host_passes(cpu, spec(extra_specs={key: "<in> avx2"})) is True
    assert caps.host_passes(cpu, spec(extra_specs={key: "<all-in> aes avx2"})) is True
    assert caps.host_passes(cpu, spec(extra_specs={key: "<in> avx512f"})) is False


def test_capabilities_filter_reads_cpu_info_kept_as_a_json_string_in_stats(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    as_json = host(stats={"cpu_flags": json.dumps({"vendor": "Intel"})})
    request = spec(extra_specs={"capabilities:cpu_flags:vendor": "Intel"})
    assert caps.host_passes(as_json, request) is True
    broken = host(stats={"cpu_flags": "{not json"})
    assert caps.host_passes(broken, request) is False


def test_capabilities_filter_rejects_a_host_missing_a_scoped_capability(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(extra_specs={"capabilities:cpu_info:model": "Skylake"})
    assert caps.host_passes(host(cpu_info={}), request) is False
    missing_attr = spec(extra_specs={"capabilities:no_such_thing": "1"})
    assert caps.host_passes(host(), missing_attr) is False


def test_capabilities_filter_ignores_keys_in_other_scopes(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(
        extra_specs={
            "hw:cpu_policy": "dedicated",
            "aggregate_instance_extra_specs:ssd": "true",
            "pci_passthrough:alias": "gpu:1",
        }
    )
    assert caps.host_passes(host(), request) is True


def test_capabilities_filter_needs_every_spec_to_match(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(extra_specs={"hypervisor_type": "QEMU", "capabilities:cpu_info:arch": "aarch64"})
    assert caps.host_passes(host(hypervisor_type="QEMU", cpu_info=CPU_INFO), request) is False


def test_capabilities_filter_turns_maxphysaddr_bits_into_a_cpu_info_requirement(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    request = spec(extra_specs={"hw:maxphysaddr_bits": "42"})
    assert caps.host_passes(host(cpu_info={"maxphysaddr": {"bits": 46}}), request) is True
    assert caps.host_passes(host(cpu_info={"maxphysaddr": {"bits": 39}}), request) is False
    assert caps.host_passes(host(cpu_info={}), request) is False


@pytest.mark.parametrize("key", ["availability_zone", "memory_mb", "local_gb", "pci_pools"])
def test_capabilities_filter_ignores_novaq_fields_nova_s_host_state_lacks(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory, key: str
) -> None:
    # Nova's HostState has no such attribute: an unscoped key naming it is ignored.
    assert caps.host_passes(host(), spec(extra_specs={key: "no such value"})) is True


def test_capabilities_filter_reads_nova_s_attribute_names(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    roomy = host(memory_mb=8192, memory_mb_used=512, local_gb=100, local_gb_used=10)
    for key, req, passes in (
        ("total_usable_ram_mb", ">= 8192", True),
        ("capabilities:total_usable_ram_mb", ">= 8193", False),
        ("free_ram_mb", "== 7680", True),
        ("total_usable_disk_gb", "== 100", True),
        ("free_disk_mb", ">= 92160", True),
        ("disk_mb_used", "== 10240", True),
        ("hypervisor_hostname", "s== " + roomy.nodename, True),
    ):
        assert caps.host_passes(roomy, spec(extra_specs={key: req})) is passes, key


def test_capabilities_filter_sees_cpu_info_as_the_json_text_nova_keeps(
    caps: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    cpu = host(cpu_info={"arch": "x86_64"})
    # Double quotes: JSON, as Nova's compute node holds it (a dict would print 'x86_64').
    assert caps.host_passes(cpu, spec(extra_specs={"cpu_info": '<in> "x86_64"'}))


def test_capabilities_filter_runs_once_per_request(caps: BaseFilter) -> None:
    assert caps.run_filter_once_per_request is True


@pytest.mark.parametrize(
    ("key", "req", "address", "passes"),
    [
        ("capabilities:host_ip", "s== 10.0.0.5", "10.0.0.5", True),
        ("capabilities:host_ip", "s== 10.0.0.5", "10.0.0.6", False),
        ("host_ip", "<in> 10.0.", "10.0.0.5", True),
        ("host_ip", "10.0.0.5", "10.0.0.5", True),
        ("capabilities:host_ip", "<or> 2001:db8::5 <or> 10.9.9.9", "2001:db8::5", True),
        # Nova's text of an IPv4-mapped address (netaddr), not Python's ::ffff:a00:5.
        ("capabilities:host_ip", "s== ::ffff:10.0.0.5", "::ffff:10.0.0.5", True),
        ("capabilities:host_ip", ">= 4", "10.0.0.5", False),  # not a number: Nova raises
        ("capabilities:host_ip:x", "1", "10.0.0.5", False),
        ("capabilities:host_ip", "s== 10.0.0.5", None, False),  # none recorded yet
    ],
)
def test_capabilities_filter_reads_the_host_ip_as_nova_s_text(
    caps: BaseFilter,
    host: HostFactory,
    spec: SpecFactory,
    key: str,
    req: str,
    address: str | None,
    passes: bool,
) -> None:
    assert caps.host_passes(host(host_ip_text=address), spec(extra_specs={key: req})) is passes
