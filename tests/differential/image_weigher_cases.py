"""Randomized cases for AggregateImagePropertiesIsolation and for the weighers' raw values
(hypothesis strategies), as plain JSON-able dicts that both sides turn into their own
objects: novaq's here, Nova's in ``tests/differential/nova_image_weighers.py``.

Image properties are drawn from every kind of Nova image property (canonicalized enums,
case-sensitive enums, lenient booleans, integers, legacy names, NUMA and trait keys, a
name Nova does not know), with values Nova takes and values it refuses; aggregate
metadata names the same properties, with values spelt as Nova spells them and not.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from models.flavor import FlavorSnapshot
from novaq.settings import Settings
from scheduler.host_state import AggregateInfo, HostState
from scheduler.instance_images import instance_props
from scheduler.request_spec import InstanceGroup, RequestSpec
from tests.factories import flavor_dict

# property: (image values, aggregate values)
PROPERTIES: dict[str, tuple[list[str], list[str]]] = {
    "hw_architecture": (
        ["x86_64", "amd64", "AMD64", "aarch64", "i386", "x86"],
        ["x86_64", "aarch64, x86_64", "i686", "amd64"],
    ),
    "architecture": (["amd64", "aarch64"], ["x86_64"]),
    "os_distro": (["debian", "ubuntu", "Debian"], ["debian", "ubuntu,debian"]),
    "hw_qemu_guest_agent": (["yes", "no", "true", "1", "maybe"], ["True", "true", "False", "yes"]),
    "hw_cpu_cores": (["4", "04", " 4", "0", "four"], ["4", "2, 4", "0"]),
    "hw_disk_bus": (["virtio", "ide", "VIRTIO"], ["virtio", "ide,scsi"]),
    "os_type": (["linux", "Windows"], ["linux", "windows"]),
    "hw_vm_mode": (["hv", "pv", "hvm", "HVM"], ["hvm", "xen"]),
    "img_hv_type": (["xapi", "qemu", "vz", "virtuozzo"], ["xen", "qemu"]),
    "img_hv_requested_version": ([">= 6.0", ">=6.0rc1, < 9", "8.2"], [">= 6.0"]),
    "hw_scsi_model": (["virtio-scsi", "LsiLogicSAS"], ["lsisas1068", "virtio-scsi"]),
    "vmware_adaptertype": (["ide", "lsiLogic", "paravirtual", "floppy"], ["ide"]),
    "hw_numa_mem.0": (["1024", "x"], []),
    "hw_numa_cpus.0": (["0-1", "1-0", "0,^0"], []),
    "hw_numa_mem": ([], ["[1024]", "[2048]"]),
    "hw_numa_cpus": ([], ["[CoercedSet({0, 1})]", "[CoercedSet()]"]),
    "trait:HW_CPU_X86_AVX2": (["required", "forbidden"], []),
    "traits_required": ([], ["['HW_CPU_X86_AVX2']"]),
    "hw_ephemeral_encryption_secret_uuid": (["not-a-uuid"], ["not-a-uuid"]),
    "my_prop": (["a", "b"], ["a"]),
    "ns.os_distro": ([], ["debian"]),
}
#: Values of PROPERTIES that Nova's image metadata refuses.
REFUSED = {"x86", "four", "VIRTIO", "virtuozzo", "8.2", "floppy", "x", "1-0"}
NAMESPACES = [(None, "."), (None, "."), (None, "."), ("hw", "_"), ("ns", "."), ("", ".")]
#: The aggregate key that checks an image property given under another name.
CHECKED_AS = {
    "architecture": "hw_architecture",
    "vmware_adaptertype": "hw_disk_bus",
    "hw_numa_mem.0": "hw_numa_mem",
    "hw_numa_cpus.0": "hw_numa_cpus",
    "trait:HW_CPU_X86_AVX2": "traits_required",
}
UUIDS = [f"00000000-0000-4000-8000-00000000020{i}" for i in range(6)]
CELLS = ["cell1", "cell2"]
MULTIPLIER_KEYS = [
    "ram_weight_multiplier",
    "num_instances_weight_multiplier",
    "hypervisor_version_weight_multiplier",
    "image_props_weight_multiplier",
    "cross_cell_move_weight_multiplier",
    "build_failure_weight_multiplier",
]
MULTIPLIER_VALUES = ["2", "-1.5", "0", "1e3", "x", " 3 "]
WEIGHT_SETTINGS = [[], ["os_distro=2", "hw_cpu_cores=-1"], ["hw_qemu_guest_agent=0.5"]]


def image_properties(draw: st.DrawFn, valid: bool = False) -> dict[str, str]:
    """Up to five properties; ``valid``: only values Nova takes."""
    props = {}
    for name in draw(st.lists(st.sampled_from(sorted(PROPERTIES)), max_size=5, unique=True)):
        values = [v for v in PROPERTIES[name][0] if not (valid and v in REFUSED)]
        if values:
            props[name] = draw(st.sampled_from(values))
    return props


@st.composite
def isolation_cases(draw: st.DrawFn) -> dict[str, Any]:
    props = image_properties(draw)
    # Mostly keys the image sets (so verdicts go both ways), some it does not.
    named = sorted({CHECKED_AS.get(k, k) for k in props} | {"os_distro", "my_prop"})
    aggregates = []
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
        keys = [k for k in sorted(PROPERTIES) if PROPERTIES[k][1]]
        pool = [k for k in named if k in keys] if draw(st.integers(0, 3)) else keys
        names = draw(st.lists(st.sampled_from(pool or keys), min_size=1, max_size=3, unique=True))
        aggregates.append({k: draw(st.sampled_from(PROPERTIES[k][1])) for k in names})
    namespace, separator = draw(st.sampled_from(NAMESPACES))
    return {
        "kind": "filter",
        "aggregates": aggregates,
        "image_properties": props,
        "namespace": namespace,
        "separator": separator,
    }


def _system_metadata(draw: st.DrawFn, requested: dict[str, str]) -> dict[str, str]:
    """An instance's system metadata: its image shares some of the request's properties
    (or none: an image of its own)."""
    props = image_properties(draw)
    share: bool = draw(st.booleans())
    if requested and share:
        shared = draw(st.lists(st.sampled_from(sorted(requested)), unique=True))
        props = {**props, **{k: requested[k] for k in shared}}
    meta = {f"image_{k}": v for k, v in props.items()}
    meta.update({"image_min_disk": "1", "image_base_image_ref": "x"})
    return meta


@st.composite
def weigher_hosts(draw: st.DrawFn, index: int, requested: dict[str, str]) -> dict[str, Any]:
    vcpus = draw(st.sampled_from([4, 16]))
    memory = draw(st.sampled_from([4096, 32768]))
    disk = draw(st.sampled_from([100, 500]))
    instances = draw(st.lists(st.sampled_from(UUIDS), unique=True, max_size=3))
    aggregates = draw(
        st.lists(
            st.dictionaries(
                st.sampled_from(MULTIPLIER_KEYS), st.sampled_from(MULTIPLIER_VALUES), max_size=2
            ),
            max_size=2,
        )
    )
    return {
        "host": f"host{index}",
        "cell": draw(st.sampled_from(CELLS)),
        "hypervisor_version": draw(st.sampled_from([0, 6_002_000, 8_002_000, 9_000_000])),
        "vcpus": vcpus,
        "vcpus_used": draw(st.integers(0, vcpus * 5)),
        "memory_mb": memory,
        "memory_mb_used": draw(st.integers(0, memory + 2048)),
        "local_gb": disk,
        "local_gb_used": draw(st.integers(0, disk + 50)),
        "num_instances": len(instances),
        "num_io_ops": draw(st.integers(0, 3)),
        "failed_builds": draw(st.integers(0, 2)),
        "pci_pools": draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["10de", "8086"]),
                    st.sampled_from(["13f1", "1520"]),
                    st.sampled_from(["type-PCI", "type-VF"]),
                    st.integers(1, 60),
                ),
                max_size=2,
                unique_by=lambda p: p[:3],
            )
        ),
        "instances": {uuid: _system_metadata(draw, requested) for uuid in instances},
        "aggregates": aggregates,
    }


@st.composite
def weigher_cases(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(1, 3))
    requested = image_properties(draw, valid=draw(st.integers(0, 9)) > 0)
    hosts = [draw(weigher_hosts(i, requested)) for i in range(count)]
    group = None
    if draw(st.booleans()):
        group = {
            "policy": draw(st.sampled_from(["soft-affinity", "soft-anti-affinity", "affinity"])),
            "members": draw(st.lists(st.sampled_from(UUIDS), unique=True, max_size=4)),
        }
    destination = None
    if draw(st.booleans()):
        destination = {
            "cell": draw(st.sampled_from([None, *CELLS])),
            "allow_cross_cell_move": draw(st.booleans()),
        }
    return {
        "kind": "weighers",
        "hosts": hosts,
        "image_properties": requested,
        "group": group,
        "destination": destination,
        "image_props_weight_setting": draw(st.sampled_from(WEIGHT_SETTINGS)),
    }


# -- novaq's side ------------------------------------------------------------------------


def novaq_isolation_settings(case: dict[str, Any]) -> Settings:
    return Settings(
        filter_scheduler={
            "aggregate_image_properties_isolation_namespace": case["namespace"],
            "aggregate_image_properties_isolation_separator": case["separator"],
        }
    )


def novaq_weigher_settings(case: dict[str, Any]) -> Settings:
    # Nova's ImagePropertiesWeigher weighs only with the option not 0: both sides use 1.
    return Settings(
        filter_scheduler={
            "image_props_weight_multiplier": 1.0,
            "image_props_weight_setting": tuple(case["image_props_weight_setting"]),
        }
    )


def _aggregates(host: str, metadata: list[dict[str, str]]) -> tuple[AggregateInfo, ...]:
    return tuple(
        AggregateInfo(i, f"agg{i}", frozenset({host}), dict(m))
        for i, m in enumerate(metadata, start=1)
    )


def novaq_isolation_host(case: dict[str, Any]) -> HostState:
    return _host({"host": "host1", "aggregates": case["aggregates"]})


def novaq_weigher_host(data: dict[str, Any]) -> HostState:
    state = _host(data)
    counts: dict[tuple[str, str], int] = {}
    for meta in data["instances"].values():
        for prop in instance_props(meta):
            counts[prop] = counts.get(prop, 0) + 1
    state.instance_image_props = counts
    return state


def _host(data: dict[str, Any]) -> HostState:
    return HostState(
        host=data["host"],
        nodename=data["host"],
        compute_node_id=1,
        vcpus_total=data.get("vcpus", 8),
        vcpus_used=data.get("vcpus_used", 0),
        memory_mb=data.get("memory_mb", 8192),
        memory_mb_used=data.get("memory_mb_used", 0),
        local_gb=data.get("local_gb", 100),
        local_gb_used=data.get("local_gb_used", 0),
        reserved_vcpus=0,
        reserved_memory_mb=0,
        reserved_disk_gb=0,
        cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.0,
        disk_allocation_ratio=1.0,
        num_instances=data.get("num_instances", 0),
        num_io_ops=data.get("num_io_ops", 0),
        failed_builds=data.get("failed_builds", 0),
        instances=set(data.get("instances", ())),
        pci_pools={(v, p, t): c for v, p, t, c in data.get("pci_pools", ())},
        aggregates=_aggregates(data["host"], data["aggregates"]),
        hypervisor_version=data.get("hypervisor_version", 0),
        cell=data.get("cell", "cell1"),
    )


def novaq_spec(case: dict[str, Any]) -> RequestSpec:
    group = case.get("group")
    destination = case.get("destination") or {}
    return RequestSpec(
        instance_uuid="00000000-0000-4000-8000-000000000001",
        flavor=FlavorSnapshot.load(flavor_dict()),
        image_properties=case["image_properties"],
        instance_group=InstanceGroup(policy=group["policy"], members=tuple(group["members"]))
        if group
        else None,
        requested_cell=destination.get("cell"),
        allow_cross_cell_move=bool(destination.get("allow_cross_cell_move")),
    )
