"""``BaseFilter.filter_all`` and ``ignores``: the whole-list pass gives exactly the hosts
``host_passes`` would, and a filter that ignores a request passes every host."""

from __future__ import annotations

from typing import Any

import pytest

from compute.pci import PciRequest
from novaq.settings import Settings
from scheduler.filters import _registry, load_filters
from scheduler.filters.capacity import CapacityFilter
from scheduler.host_state import HostState
from scheduler.request_spec import InstanceGroup, RequestSpec
from tests.unit.scheduler.filters.conftest import build_host, build_spec

GROUP_MEMBER = "00000000-0000-4000-8000-00000000000a"


def _hosts() -> list[HostState]:
    """Hosts that differ in everything some filter reads."""
    return [
        build_host("plain"),
        build_host("full", memory_mb_used=8192, vcpus_used=40, local_gb_used=100),
        build_host("down", service_up=False),
        build_host("disabled", service_disabled=True),
        build_host("in-zone", aggregates=[{"availability_zone": "z", "ssd": "true"}]),
        build_host("with-member", instances={GROUP_MEMBER}, num_instances=60, num_io_ops=9),
        build_host("gpu", pci_pools={("10de", "13f1", "type-PCI"): 1}),
        build_host("arm", supported_instances=(("aarch64", "qemu", "hvm"),)),
        build_host("bare", supported_instances=(), hypervisor_version=0),
    ]


_GROUP = InstanceGroup(uuid="g", policy="anti-affinity", members=(GROUP_MEMBER,))
_SPECS: list[dict[str, Any]] = [
    {},
    {"availability_zone": "z"},
    {"extra_specs": {"ssd": "true"}},
    {"extra_specs": {"capabilities:cpu_info:arch": "x86_64"}},
    {"hints": {"same_host": GROUP_MEMBER}},
    {"hints": {"different_host": [GROUP_MEMBER]}},
    {"image_properties": {"hw_architecture": "aarch64"}},
    {"image": "isolated-image"},
    {"instance_group": _GROUP},
    {"instance_group": InstanceGroup(uuid="a", policy="affinity", hosts=("gpu",))},
    {"instance_group": InstanceGroup(uuid="s", policy="soft-affinity", hosts=("gpu",))},
    {"memory_mb": 8192, "vcpus": 4},
    {"pci_requests": (PciRequest("gpu", 1, "10de", "13f1"),)},
]
_SETTINGS = [
    Settings(),
    Settings(filter_scheduler={"isolated_hosts": ["plain"], "isolated_images": ["isolated-image"]}),
    Settings(filter_scheduler={"image_properties_default_architecture": "x86_64"}),
]


def _spec(overrides: dict[str, Any]) -> RequestSpec:
    return build_spec(**overrides)


@pytest.mark.parametrize("name", sorted(_registry()))
def test_filter_all_keeps_exactly_the_hosts_that_pass(name: str) -> None:
    hosts = _hosts()
    for settings in _SETTINGS:
        (flt,) = load_filters(settings, [name])
        for overrides in _SPECS:
            spec = _spec(overrides)
            expected = [h for h in hosts if flt.host_passes(h, spec)]
            assert flt.filter_all(hosts, spec) == expected, (name, overrides)
            if flt.ignores(spec):
                assert expected == hosts, (name, overrides)


def test_a_filter_that_ignores_the_request_asks_no_host() -> None:
    (flt,) = load_filters(Settings(), ["AvailabilityZoneFilter"])
    asked: list[str] = []
    flt.host_passes = lambda host, spec: bool(asked.append(host.host))  # type: ignore[method-assign]
    assert flt.filter_all(_hosts(), _spec({})) == _hosts()
    assert asked == []
    flt.filter_all(_hosts(), _spec({"availability_zone": "z"}))
    assert len(asked) == len(_hosts())


@pytest.mark.parametrize("name", ["CoreFilter", "RamFilter", "DiskFilter"])
def test_a_capacity_filter_reads_the_fields_its_free_and_total_read(name: str) -> None:
    """``CapacityFilter.filter_all`` computes the free amount from ``fields`` inline: they
    must be the class's own (a host just inside and one just outside its free amount)."""
    (flt,) = load_filters(Settings(), [name])
    assert isinstance(flt, CapacityFilter)
    host = build_host(
        "odd",
        vcpus_used=5,
        memory_mb_used=3000,
        local_gb_used=37,
        reserved_vcpus=1,
        reserved_memory_mb=700,
        reserved_disk_gb=3,
        cpu_allocation_ratio=1.5,
        ram_allocation_ratio=1.25,
        disk_allocation_ratio=0.9,
    )
    total, reserved, used, ratio = (getattr(host, f) for f in flt.fields)
    assert total == flt.total(host)
    assert (total - reserved) * ratio - (used - reserved) == flt.free(host)
    free = int(flt.free(host))
    for requested, kept in ((free, [host]), (free + 1, [])):
        sizes = {"CoreFilter": "vcpus", "RamFilter": "memory_mb", "DiskFilter": "root_gb"}
        spec = _spec({sizes[name]: requested})
        assert (
            flt.filter_all([host], spec) == kept == [h for h in [host] if flt.host_passes(h, spec)]
        )
