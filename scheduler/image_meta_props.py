"""The image properties Nova knows (its ``ImageMetaProps`` fields), and the value each holds
once Nova has read an image's properties: legacy names mapped to current ones, enum names
canonicalized (``amd64`` → ``x86_64``), booleans and integers parsed, the NUMA and trait
keys gathered into lists. A property Nova does not know is dropped; a value Nova refuses
raises ``ValueError`` naming the property (Nova's API refuses such an image at boot).

``read`` gives the values; ``as_text`` spells one as Nova's ``str()`` does, which is how
AggregateImagePropertiesIsolation and ImagePropertiesWeigher compare them with strings.
Nothing here knows hosts or requests.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from scheduler import hypervisor_version

Value = Any
Reader = Callable[[str, Any], Value]

NUMA_NODES_MAX: Final = 128
TRUE_WORDS: Final = frozenset({"1", "t", "true", "on", "y", "yes"})


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ARCHITECTURES: Final = _words(
    "alpha armv6 armv7l armv7b aarch64 cris i686 ia64 lm32 m68k microblaze microblazeel "
    "mips mipsel mips64 mips64el openrisc parisc parisc64 ppc ppcle ppc64 ppc64le ppcemb "
    "s390 s390x sh4 sh4eb sparc sparc64 unicore32 x86_64 xtensa xtensaeb"
)
ARCHITECTURE_ALIASES: Final = {
    "i386": "i686",
    "i486": "i686",
    "i586": "i686",
    "x86_32": "i686",
    "x86_32p": "i686",
    "amd64": "x86_64",
}
HV_TYPES: Final = _words(
    "baremetal bhyve docker fake hyperv ironic kqemu kvm lxc lxd openvz parallels phyp "
    "qemu test uml vbox vz vmware xen zvm prsm"
)
VM_MODES: Final = _words("hvm xen uml exe")
VM_MODE_ALIASES: Final = {"pv": "xen", "hv": "hvm", "baremetal": "hvm"}
HV_TYPE_ALIASES: Final = {"xapi": "xen"}
DISK_BUSES: Final = _words("fdc ide sata scsi usb virtio xen lxc uml")
SCSI_MODELS: Final = _words("buslogic ibmvscsi lsilogic lsisas1068 lsisas1078 virtio-scsi vmpvscsi")
SCSI_MODEL_ALIASES: Final = {"lsilogicsas": "lsisas1068", "paravirtual": "vmpvscsi"}
VIF_MODELS: Final = _words(
    "virtio ne2k_pci pcnet rtl8139 e1000 e1000e netfront spapr-vlan lan9118 sriov vmxnet "
    "vmxnet3 igb"
)
VIF_MODEL_ALIASES: Final = {
    "virtuale1000": "e1000",
    "virtuale1000e": "e1000e",
    "virtualpcnet32": "pcnet",
    "virtualsriovethernetcard": "sriov",
    "virtualvmxnet": "vmxnet",
    "virtualvmxnet3": "vmxnet3",
}


def _enum(
    choices: Iterable[str], aliases: Mapping[str, str] | None = None, lower: bool = False
) -> Reader:
    """An enum field: ``lower`` (or ``aliases``, which implies it) folds case first, as
    Nova's canonicalizing enums do; the others are case-sensitive."""
    allowed = frozenset(choices)
    fold = lower or aliases is not None

    def read(name: str, value: Any) -> str:
        text = _text(name, value)
        if fold:
            text = text.lower()
            text = (aliases or {}).get(text, text)
        if text not in allowed:
            raise ValueError(f"{name}={value!r} is not one of {', '.join(sorted(allowed))}")
        return text

    return read


def _text(name: str, value: Any) -> str:
    # Nova's StringField takes str, int and float (bool too: it is an int).
    if isinstance(value, str | int | float):
        return str(value)
    raise ValueError(f"{name} must be a string, not {type(value).__name__}")


def _boolean(name: str, value: Any) -> bool:
    # oslo's bool_from_string, not strict: anything but a true word is False.
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in TRUE_WORDS


def _integer(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _version_predicate(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name}={value!r} must be a string")
    try:
        hypervisor_version.parse(value)
    except ValueError as exc:
        raise ValueError(f"{name}={value!r}: {exc}") from None
    return value


def _list_of_dicts(name: str, value: Any) -> list[dict[str, str | None]]:
    """A list of dicts of strings or None (block device mappings)."""
    if not isinstance(value, list):
        raise ValueError(f"{name} must be a list, not {type(value).__name__}")
    result = []
    for item in value:
        if not isinstance(item, dict):
            raise ValueError(f"{name} must hold dicts, not {type(item).__name__}")
        result.append({str(k): None if v is None else _text(name, v) for k, v in item.items()})
    return result


FIELDS: Final[dict[str, Reader]] = {
    "hw_architecture": _enum(ARCHITECTURES, ARCHITECTURE_ALIASES),
    "hw_emulation_architecture": _enum(ARCHITECTURES, ARCHITECTURE_ALIASES),
    "hw_auto_disk_config": _text,
    "hw_boot_menu": _boolean,
    "hw_cdrom_bus": _enum(DISK_BUSES),
    "hw_cpu_cores": _integer,
    "hw_cpu_sockets": _integer,
    "hw_cpu_max_cores": _integer,
    "hw_cpu_max_sockets": _integer,
    "hw_cpu_max_threads": _integer,
    "hw_cpu_policy": _enum(_words("dedicated shared mixed")),
    "hw_cpu_thread_policy": _enum(_words("prefer isolate require")),
    "hw_cpu_realtime_mask": _text,
    "hw_cpu_threads": _integer,
    "hw_device_id": _integer,
    "hw_disk_bus": _enum(DISK_BUSES),
    "hw_disk_type": _text,
    "hw_floppy_bus": _enum(DISK_BUSES),
    "hw_firmware_type": _enum(_words("uefi bios")),
    "hw_firmware_stateless": _boolean,
    "hw_input_bus": _enum(_words("usb virtio")),
    "hw_ipxe_boot": _boolean,
    "hw_locked_memory": _boolean,
    "hw_machine_type": _text,
    "hw_mem_encryption": _boolean,
    "hw_mem_encryption_model": _enum(_words("amd-sev amd-sev-es amd-sev-snp intel-tdx")),
    "hw_mem_page_size": _text,
    "hw_numa_nodes": _integer,
    # hw_numa_cpus and hw_numa_mem: from the ``.N`` keys (``_numa_lists``).
    "hw_pci_numa_affinity_policy": _enum(_words("required legacy preferred socket")),
    "hw_pointer_model": _enum(("usbtablet",)),
    "hw_pmu": _boolean,
    "hw_qemu_guest_agent": _boolean,
    "hw_rescue_bus": _enum(DISK_BUSES),
    "hw_rescue_device": _enum(_words("cdrom disk floppy fs lun")),
    "hw_rng_model": _enum(("virtio",)),
    "hw_time_hpet": _boolean,
    "hw_serial_port_count": _integer,
    "hw_scsi_model": _enum(SCSI_MODELS, SCSI_MODEL_ALIASES),
    "hw_video_model": _enum(_words("cirrus qxl vga vmvga xen virtio gop none bochs")),
    "hw_video_ram": _integer,
    "hw_vif_model": _enum(VIF_MODELS, VIF_MODEL_ALIASES),
    "hw_viommu_model": _enum(_words("intel smmuv3 virtio auto")),
    "hw_vm_mode": _enum(VM_MODES, VM_MODE_ALIASES),
    "hw_watchdog_action": _enum(_words("none pause poweroff reset disabled")),
    "hw_vif_multiqueue_enabled": _boolean,
    "hw_tpm_model": _enum(_words("tpm-tis tpm-crb")),
    "hw_tpm_version": _enum(_words("1.2 2.0")),
    "hw_ephemeral_encryption": _boolean,
    "hw_ephemeral_encryption_format": _enum(_words("plain luks luksv2")),
    # NOTE: Nova's UUID fields take any text (a non-UUID only warns).
    "hw_ephemeral_encryption_secret_uuid": _text,
    "hw_virtio_packed_ring": _boolean,
    "hw_maxphysaddr_mode": _enum(_words("passthrough emulate")),
    "hw_maxphysaddr_bits": _integer,
    "hw_sound_model": _enum(_words("sb16 es1370 pcspk ac97 ich6 ich9 usb virtio")),
    "hw_usb_model": _enum(_words("none nec-xhci qemu-xhci")),
    "hw_redirected_usb_ports": _integer,
    "img_bittorrent": _boolean,
    "img_bdm_v2": _boolean,
    "img_block_device_mapping": _list_of_dicts,
    "img_cache_in_nova": _boolean,
    "img_compression_level": _integer,
    "img_hv_requested_version": _version_predicate,
    "img_hv_type": _enum(HV_TYPES, HV_TYPE_ALIASES),
    "img_config_drive": _enum(_words("optional mandatory")),
    "img_linked_clone": _boolean,
    "img_mappings": _list_of_dicts,
    "img_owner_id": _text,
    "img_root_device_name": _text,
    "img_use_agent": _boolean,
    "img_version": _integer,
    "img_signature": _text,
    "img_signature_hash_method": _enum(_words("SHA-224 SHA-256 SHA-384 SHA-512")),
    "img_signature_certificate_uuid": _text,
    "img_signature_key_type": _enum(
        _words(
            "DSA ECC_SECP384R1 ECC_SECP521R1 ECC_SECT409K1 ECC_SECT409R1 ECC_SECT571K1 "
            "ECC_SECT571R1 RSA-PSS"
        )
    ),
    "img_hide_hypervisor_id": _boolean,
    "os_admin_user": _text,
    "os_command_line": _text,
    "os_distro": _text,
    "os_require_quiesce": _boolean,
    "os_secure_boot": _enum(_words("required disabled optional")),
    "os_skip_agent_inject_files_at_boot": _boolean,
    "os_skip_agent_inject_ssh": _boolean,
    "os_type": _enum(_words("linux windows"), lower=True),
    # traits_required: from the ``trait:<NAME>=required`` keys (``_traits``).
}

#: Every property name Nova's image metadata has a field for.
FIELD_NAMES: Final = frozenset({*FIELDS, "hw_numa_cpus", "hw_numa_mem", "traits_required"})

#: Legacy property names and the current names they set (the current name wins when an
#: image has both).
LEGACY_NAMES: Final = {
    "architecture": "hw_architecture",
    "owner_id": "img_owner_id",
    "vmware_disktype": "hw_disk_type",
    "vmware_image_version": "img_version",
    "vmware_ostype": "os_distro",
    "auto_disk_config": "hw_auto_disk_config",
    "ipxe_boot": "hw_ipxe_boot",
    "xenapi_device_id": "hw_device_id",
    "xenapi_image_compression_level": "img_compression_level",
    "vmware_linked_clone": "img_linked_clone",
    "xenapi_use_agent": "img_use_agent",
    "xenapi_skip_agent_inject_ssh": "os_skip_agent_inject_ssh",
    "xenapi_skip_agent_inject_files_at_boot": "os_skip_agent_inject_files_at_boot",
    "cache_in_nova": "img_cache_in_nova",
    "vm_mode": "hw_vm_mode",
    "bittorrent": "img_bittorrent",
    "mappings": "img_mappings",
    "block_device_mapping": "img_block_device_mapping",
    "bdm_v2": "img_bdm_v2",
    "root_device_name": "img_root_device_name",
    "hypervisor_version_requires": "img_hv_requested_version",
    "hypervisor_type": "img_hv_type",
}
#: Legacy names whose value Nova's image client decodes from JSON first.
JSON_LEGACY_NAMES: Final = frozenset({"mappings", "block_device_mapping"})


def with_current_names(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with each legacy name's value also under its current name (unless the
    image sets that too), values as given: what a reader of single properties needs."""
    renamed = dict(properties)
    for legacy, name in LEGACY_NAMES.items():
        if legacy in properties and name not in properties:
            renamed[name] = properties[legacy]
    return renamed


def is_read(name: str) -> bool:
    """Whether ``read`` looks at a property of this name at all."""
    return (
        name in FIELDS
        or name in LEGACY_NAMES
        or name == "vmware_adaptertype"
        or name.startswith(("trait:", "hw_numa_cpus.", "hw_numa_mem."))
    )


def read(properties: Mapping[str, Any]) -> dict[str, Value]:
    """The values Nova's image metadata holds for ``properties`` (only the names it has a
    field for), or ValueError naming the first property it refuses."""
    values: dict[str, Value] = {}
    for legacy, name in LEGACY_NAMES.items():
        if legacy in properties:
            values[name] = FIELDS[name](legacy, _decoded(legacy, properties[legacy]))
    _vmware_adapter(properties.get("vmware_adaptertype"), values)
    for name, reader in FIELDS.items():
        if name in properties:
            values[name] = reader(name, properties[name])
    values.update(_numa_lists(properties))
    traits = [key[len("trait:") :] for key, v in properties.items() if _required_trait(key, v)]
    if traits:
        values["traits_required"] = traits
    return values


@functools.lru_cache(maxsize=1024)
def read_items(items: tuple[tuple[str, str], ...]) -> dict[str, Value]:
    """``read`` of hashable properties (many instances share an image); callers must not
    change the dict they get."""
    return read(dict(items))


def _decoded(name: str, value: Any) -> Any:
    if name in JSON_LEGACY_NAMES and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{name} is not JSON: {exc}") from None
    return value


def _vmware_adapter(adapter: Any, values: dict[str, Value]) -> None:
    if adapter == "ide":
        values["hw_disk_bus"] = "ide"
    elif adapter:
        values["hw_disk_bus"] = "scsi"
        values["hw_scsi_model"] = FIELDS["hw_scsi_model"]("vmware_adaptertype", adapter)


def _required_trait(key: Any, value: Any) -> bool:
    return str(key).startswith("trait:") and str(value) == "required"


def _numa_lists(properties: Mapping[str, Any]) -> dict[str, Value]:
    """``hw_numa_cpus`` and ``hw_numa_mem`` from ``hw_numa_cpus.0``, ``.1``, … (up to the
    first missing index)."""
    found: dict[str, Value] = {}
    for name, parse in (("hw_numa_mem", _integer), ("hw_numa_cpus", parse_cpu_spec)):
        cells = []
        for cell in range(NUMA_NODES_MAX):
            key = f"{name}.{cell}"
            if key not in properties:
                break
            cells.append(parse(key, properties[key]))
        if cells:
            found[name] = cells
    return found


def parse_cpu_spec(name: str, spec: Any) -> set[int]:
    """A CPU set such as ``0-3,^2,6``: numbers and ranges, less the ``^`` exclusions."""
    wanted: set[int] = set()
    excluded: set[int] = set()
    for part in str(spec).split(","):
        rule = part.strip()
        if not rule:
            continue
        start, dash, end = rule.partition("-")
        exclude = rule.startswith("^")
        if exclude:
            start = start[1:]
        try:
            first = int(start)
            last = int(end) if dash else first
        except ValueError:
            raise ValueError(f"{name}={spec!r}: {rule!r} is not a CPU, range or ^CPU") from None
        if first > last:
            raise ValueError(f"{name}={spec!r}: invalid range {rule!r}")
        (excluded if exclude else wanted).update(range(first, last + 1))
    return wanted - excluded


def as_text(value: Value) -> str:
    """``value`` as Nova's ``str()`` spells it (``True``, ``[1024, 2048]``, a set of CPUs
    as ``CoercedSet({0, 1})``: Nova keeps its own set type there)."""
    if isinstance(value, bool | int | str):
        return str(value)
    if isinstance(value, set):
        return f"CoercedSet({_set_text(value)})" if value else "CoercedSet()"
    if isinstance(value, list):
        return "[" + ", ".join(_repr(item) for item in value) + "]"
    return str(value)


def _repr(item: Value) -> str:
    if isinstance(item, set):
        return as_text(item)
    return repr(item)


def _set_text(values: set[int]) -> str:
    return "{" + ", ".join(str(v) for v in sorted(values)) + "}"
