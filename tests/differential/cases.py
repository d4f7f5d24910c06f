"""Randomized host states and requests (hypothesis strategies), as plain JSON-able dicts
that both sides turn into their own objects: novaq's ``HostState``/``RequestSpec`` here,
Nova's in ``tests/differential/nova_verdicts.py``.

The values are drawn from what each field really holds (Nova's enum names, versions as
Nova encodes them, extra spec operators of ``extra_specs_ops``), with the edge cases the
issue names among them: dotless and pre-release version operands, empty hints, unscoped
capability keys that only one side's host state has.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from novaq.settings import Settings
from scheduler.host_state import AggregateInfo, HostState
from scheduler.request_spec import RequestSpec
from tests.differential.zones_pci_groups import (
    REQUEST_UUID,
    host_extras,
    novaq_group,
    novaq_options_settings,
    novaq_pci_pools,
    novaq_pci_requests,
    novaq_zone,
    pci_alias_spec,
    request_extras,
)
from tests.factories import flavor_dict

#: The compute node's uuid on both sides.
NODE_UUID = "00000000-0000-4000-8000-00000000000a"
UUIDS = [f"00000000-0000-4000-8000-00000000010{i}" for i in range(4)]
ARCHES = ["x86_64", "aarch64", "i686", "ppc64le"]
HV_TYPES = ["qemu", "kvm", "xen", "lxc"]
# NOTE: no "xen" or "uml" vm_mode: they are also hypervisor type names, and Nova's
# ImagePropertiesFilter accepts a wanted name found anywhere in the host's triple, which
# novaq deliberately does not (see that filter's _triple_matches).
HOST_VM_MODES = ["hvm", "exe"]
IMAGE_VM_MODES = ["hvm", "exe", "hv", "baremetal"]
IMAGE_ARCHES = [*ARCHES, "amd64", "i386", "s390x"]
IMAGE_HV_TYPES = [*HV_TYPES, "xapi", "vmware"]
FEATURES = ["avx", "avx2", "aes", "sse4.2", "vmx"]

VERSION_OPERANDS = ["6", "7", "9", "6.0", "6.2", "6.2.0", "7.2.22", "6.0rc1", "6002000", "6.10"]
VERSION_OPS = ["<", "<=", "==", "!=", ">=", ">"]
BAD_VERSIONS = ["8.2", "= 6.0", ">=", ">= x.y", "=> 6.0"]

CAPABILITY_KEYS = [
    "hypervisor_type",
    "capabilities:hypervisor_type",
    "vcpus_total",
    "capabilities:vcpus_used",
    "total_usable_ram_mb",
    "free_disk_mb",
    "num_instances",
    "capabilities:num_io_ops",
    "capabilities:cpu_info:arch",
    "capabilities:cpu_info:features",
    "capabilities:cpu_info:topology:sockets",
    "capabilities:no_such_capability",
    # novaq's own fields Nova's HostState lacks: an unscoped key naming them is ignored.
    "memory_mb",
    "availability_zone",
    "local_gb",
    "ssd",
    "hw:cpu_policy",
    "aggregate_instance_extra_specs:ssd",
    "gpus",
    "aggregate_instance_extra_specs:gpus",
]
CAPABILITY_VALUES = [
    "QEMU",
    "s== QEMU",
    "s!= QEMU",
    "<in> EMU",
    "x86_64",
    "<or> x86_64 <or> aarch64",
    "<in> avx2",
    "<all-in> aes avx",
    ">= 4",
    "<= 8",
    "== 0",
    "2",
    "dedicated",
    "true",
    "s== true",
    ">= 2",
    "<or> true <or> fast",
]


@st.composite
def hosts(draw: st.DrawFn) -> dict[str, Any]:
    vcpus = draw(st.sampled_from([2, 4, 8, 16]))
    memory = draw(st.sampled_from([2048, 8192, 32768]))
    disk = draw(st.sampled_from([20, 100, 500]))
    cpu_info: dict[str, Any] = {
        "arch": draw(st.sampled_from(ARCHES)),
        "features": draw(st.lists(st.sampled_from(FEATURES), unique=True, max_size=4)),
        "topology": {"sockets": draw(st.integers(1, 2)), "cores": 4, "threads": 1},
    }
    if draw(st.booleans()):
        cpu_info["maxphysaddr"] = {"mode": "passthrough", "bits": draw(st.sampled_from([39, 46]))}
    triples = draw(
        st.lists(
            st.tuples(
                st.sampled_from(ARCHES), st.sampled_from(HV_TYPES), st.sampled_from(HOST_VM_MODES)
            ),
            max_size=3,
            unique=True,
        )
    )
    return {
        **draw(host_extras()),
        "hypervisor_type": draw(st.sampled_from(["QEMU", "Xen"])),
        "hypervisor_version": draw(
            st.sampled_from([0, 6_000_000, 6_002_000, 7_002_022, 9_000_000])
        ),
        "cpu_info": cpu_info,
        "vcpus": vcpus,
        "vcpus_used": draw(st.integers(0, vcpus * 2)),
        "memory_mb": memory,
        "memory_mb_used": draw(st.integers(512, memory)),
        "local_gb": disk,
        "local_gb_used": draw(st.integers(0, disk)),
        "num_instances": draw(st.sampled_from([0, 1, 49, 50, 51])),
        "num_io_ops": draw(st.sampled_from([0, 7, 8, 9])),
        "supported_instances": [list(t) for t in triples],
        "disabled": draw(st.booleans()),
        "instances": draw(st.lists(st.sampled_from(UUIDS), unique=True, max_size=2)),
        "aggregates": draw(st.lists(aggregate_metadata(), max_size=2)),
    }


AGGREGATE_METADATA = {
    "max_io_ops_per_host": ["0", "4", "8", "12", "eight"],
    "max_instances_per_host": ["1", "10", "50", "60", "ten"],
    "instance_type": ["small", "m1, small", "large,m1", "other"],
    # AvailabilityZoneFilter and AggregateInstanceExtraSpecsFilter.
    "availability_zone": ["az1", "az2", "nova", "az1,az2"],
    "ssd": ["true", "false", "true, fast"],
    "gpus": ["1", "2", "4", "many"],
}


def aggregate_metadata() -> st.SearchStrategy[dict[str, str]]:
    return st.fixed_dictionaries(
        {},
        optional={key: st.sampled_from(values) for key, values in AGGREGATE_METADATA.items()},
    )


def _version_requirement() -> st.SearchStrategy[str]:
    clause = st.builds(
        lambda op, space, operand: f"{op}{space}{operand}",
        st.sampled_from(VERSION_OPS),
        st.sampled_from(["", " "]),
        st.sampled_from(VERSION_OPERANDS),
    )
    good = st.lists(clause, min_size=1, max_size=2).map(", ".join)
    return st.one_of(good, st.sampled_from(BAD_VERSIONS))


@st.composite
def image_properties(draw: st.DrawFn) -> dict[str, str]:
    props: dict[str, str] = {}
    for key, values in (
        ("hw_architecture", st.sampled_from(IMAGE_ARCHES)),
        ("img_hv_type", st.sampled_from(IMAGE_HV_TYPES)),
        ("hw_vm_mode", st.sampled_from(IMAGE_VM_MODES)),
        ("img_hv_requested_version", _version_requirement()),
        ("hw_maxphysaddr_bits", st.sampled_from(["40", "42", "46", "48"])),
    ):
        if draw(st.booleans()):
            props[key] = draw(values)
    return props


@st.composite
def requests(draw: st.DrawFn) -> dict[str, Any]:
    extra_specs = draw(
        st.dictionaries(
            st.sampled_from(CAPABILITY_KEYS), st.sampled_from(CAPABILITY_VALUES), max_size=2
        )
    )
    if draw(st.booleans()):
        extra_specs["hw:maxphysaddr_bits"] = draw(st.sampled_from(["40", "42", "46"]))
    hint_values = st.lists(st.sampled_from([*UUIDS, ""]), min_size=1, max_size=2)
    hints = draw(
        st.dictionaries(st.sampled_from(["same_host", "different_host"]), hint_values, max_size=2)
    )
    extra_specs.update(draw(pci_alias_spec()))
    return {
        **draw(request_extras()),
        "flavor_name": draw(st.sampled_from(["small", "m1", "large"])),
        "extra_specs": extra_specs,
        "image_properties": draw(image_properties()),
        "hints": hints,
    }


def novaq_host(data: dict[str, Any]) -> HostState:
    aggregates = tuple(
        AggregateInfo(i, f"agg{i}", frozenset({data["host"]}), dict(metadata))
        for i, metadata in enumerate(data["aggregates"], start=1)
    )
    return HostState(
        host=data["host"],
        nodename=data["host"],
        compute_node_id=1,
        vcpus_total=data["vcpus"],
        vcpus_used=data["vcpus_used"],
        memory_mb=data["memory_mb"],
        memory_mb_used=data["memory_mb_used"],
        local_gb=data["local_gb"],
        local_gb_used=data["local_gb_used"],
        reserved_vcpus=0,
        reserved_memory_mb=0,
        reserved_disk_gb=0,
        cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.0,
        disk_allocation_ratio=1.0,
        service_disabled=data["disabled"],
        num_instances=data["num_instances"],
        num_io_ops=data["num_io_ops"],
        instances=set(data["instances"]),
        hypervisor_type=data["hypervisor_type"],
        hypervisor_version=data["hypervisor_version"],
        cpu_info=data["cpu_info"],
        supported_instances=tuple(tuple(t) for t in data["supported_instances"]),
        aggregates=aggregates,
        availability_zone=novaq_zone(aggregates),
        pci_pools=novaq_pci_pools(data),
        uuid=NODE_UUID,
        host_ip_text=data.get("host_ip", "127.0.0.1"),
    )


def novaq_spec(data: dict[str, Any]) -> RequestSpec:
    return RequestSpec(
        instance_uuid=data.get("instance_uuid", REQUEST_UUID),
        flavor={**flavor_dict(extra_specs=data["extra_specs"]), "name": data["flavor_name"]},
        hints=data["hints"],
        image_properties=data["image_properties"],
        image=data.get("image_id", ""),
        image_name=data.get("image_name", ""),
        availability_zone=data.get("availability_zone"),
        instance_group=novaq_group(data),
        pci_requests=novaq_pci_requests(data),
    )


def novaq_settings(request: dict[str, Any] | None = None) -> Settings:
    """The settings of a case: its request's ``options`` (isolated hosts, PCI aliases)."""
    return novaq_options_settings((request or {}).get("options"))
