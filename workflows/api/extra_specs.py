"""The flavor extra-spec names Nova knows (its strict extra-spec validation, API 2.86):
the namespaces it validates, and in each the names it accepts.

A key whose namespace (the part before its first colon) is one of these must be one of
the namespace's names, else it is refused naming the key, as Nova refuses it. A key
with no colon, or in a namespace Nova does not validate (``gpu:``, ``powervm:`` since
Nova dropped that driver), is accepted unchecked, as Nova accepts it.

Only names are checked here; a value's operator is checked by
``scheduler.filters.extra_specs_ops.requirement_problem`` and a PCI alias by
``compute.pci``. Standard trait names are checked by shape only (upper case, digits and
underscores): the full list lives in the ``os-traits`` package, which novaq does not
depend on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: A resource or trait request group suffix (``resources1:``, ``trait_gpu:``).
_GROUP = r"[a-zA-Z0-9_-]{0,64}"

#: The standard resource classes (``os-resource-classes``), as ``resources*:<class>``.
RESOURCE_CLASSES = (
    "VCPU",
    "MEMORY_MB",
    "DISK_GB",
    "PCI_DEVICE",
    "SRIOV_NET_VF",
    "NUMA_SOCKET",
    "NUMA_CORE",
    "NUMA_THREAD",
    "NUMA_MEMORY_MB",
    "IPV4_ADDRESS",
    "VGPU",
    "VGPU_DISPLAY_HEAD",
    "NET_BW_EGR_KILOBIT_PER_SEC",
    "NET_BW_IGR_KILOBIT_PER_SEC",
    "PCPU",
    "MEM_ENCRYPTION_CONTEXT",
    "FPGA",
    "PGPU",
    "NET_PACKET_RATE_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_EGR_KILOPACKET_PER_SEC",
    "NET_PACKET_RATE_IGR_KILOPACKET_PER_SEC",
)

#: Host state the ComputeCapabilitiesFilter compares as a whole.
_FLAT_CAPABILITIES = [
    "id",
    "uuid",
    "service_id",
    "host",
    "vcpus",
    "memory_mb",
    "local_gb",
    "vcpus_used",
    "memory_mb_used",
    "local_gb_used",
    "hypervisor_type",
    "hypervisor_version",
    "hypervisor_hostname",
    "free_ram_mb",
    "free_disk_gb",
    "current_workload",
    "running_vms",
    "disk_available_least",
    "host_ip",
    "mapped",
    "cpu_allocation_ratio",
    "ram_allocation_ratio",
    "disk_allocation_ratio",
    "total_usable_ram_mb",
    "total_usable_disk_gb",
    "disk_mb_used",
    "free_disk_mb",
    "vcpus_total",
    "num_instances",
    "num_io_ops",
    "failed_builds",
    "aggregates",
    "cell_uuid",
    "updated",
]
#: Host state it can also look into (``capabilities:cpu_info:arch``).
_NESTED_CAPABILITIES = [
    "cpu_info",
    "metrics",
    "stats",
    "numa_topology",
    "supported_hv_specs",
    "pci_device_pools",
    "nodename",
    "pci_stats",
    "supported_instances",
    "limits",
    "instances",
]

_HW = [
    "cpu_realtime",
    "cpu_realtime_mask",
    "hide_hypervisor_id",
    "cpu_policy",
    "cpu_thread_policy",
    "emulator_threads_policy",
    "cpu_dedicated_mask",
    "mem_page_size",
    "locked_memory",
    "numa_nodes",
    "pci_numa_affinity_policy",
    "cpu_sockets",
    "cpu_cores",
    "cpu_threads",
    "cpu_max_sockets",
    "cpu_max_cores",
    "cpu_max_threads",
    "boot_menu",
    "vif_multiqueue_enabled",
    "mem_encryption",
    "mem_encryption_model",
    "pmem",
    "pmu",
    "serial_port_count",
    "tpm_model",
    "tpm_version",
    "tpm_secret_security",
    "watchdog_action",
    "viommu_model",
    "virtio_packed_ring",
    "sound_model",
    "usb_model",
    "redirected_usb_ports",
    "ephemeral_encryption",
    "ephemeral_encryption_format",
]


def _quota_names() -> list[str]:
    names = [
        f"{kind}_{suffix}"
        for kind in ("cpu", "memory", "disk_io", "vif")
        for suffix in ("limit", "reservation", "shares_level", "shares_share")
    ]
    names += ["cpu_shares", "cpu_period", "cpu_quota"]
    names += [
        f"disk_{stat}_{metric}_sec"
        for stat in ("read", "write", "total")
        for metric in ("bytes", "iops")
    ]
    names += [
        f"vif_{way}_{metric}"
        for way in ("inbound", "outbound")
        for metric in ("average", "peak", "burst")
    ]
    return names


def _exact(names: Iterable[str]) -> list[str]:
    return [re.escape(name) for name in names]


#: namespace pattern -> the patterns of the names after its colon (full matches).
NAMESPACES: dict[str, list[str]] = {
    "accel": ["device_profile"],
    "aggregate_instance_extra_specs": [".+"],
    "capabilities": [
        *_exact(_FLAT_CAPABILITIES),
        *(rf"{re.escape(name)}(:\w+)*" for name in _NESTED_CAPABILITIES),
    ],
    "hw": [*_exact(_HW), r"numa_cpus\.\d+", r"numa_mem\.\d+"],
    "hw_rng": ["allowed", "rate_bytes", "rate_period"],
    "hw_video": ["ram_max_mb"],
    "os": ["secure_boot"],
    "pci_passthrough": ["alias"],
    "quota": _exact(_quota_names()),
    f"resources{_GROUP}": [*_exact(RESOURCE_CLASSES), r"CUSTOM_[A-Z0-9_]+"],
    f"trait{_GROUP}": [r"[A-Z][A-Z0-9_]*"],
    "vmware": ["hw_version", "storage_policy"],
}

_COMPILED = [
    (re.compile(namespace), re.compile("|".join(f"(?:{n})" for n in names)))
    for namespace, names in NAMESPACES.items()
]


def name_problem(key: str) -> str | None:
    """Why Nova would refuse the extra-spec key ``key`` (None if it would not): a name
    it does not know in a namespace it validates."""
    namespace, colon, name = key.partition(":")
    if not colon:
        return None
    for pattern, names in _COMPILED:
        if pattern.fullmatch(namespace):
            if names.fullmatch(name):
                return None
            return f"a name Nova knows in the namespace {namespace!r}"
    return None
