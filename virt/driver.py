"""The compute driver contract: value objects and the ``ComputeDriver`` Protocol.

Owns what compute logic may ask of a hypervisor and the plain, JSON-friendly
values that cross that line. Refuses to implement anything: the libvirt driver
lives in ``virt.libvirt.driver``, the in-memory one in ``virt.fake``.

Semantics every driver keeps (tests in ``tests/unit/virt`` check both drivers):

* ``spawn`` is idempotent: a guest with that uuid that already runs is returned
  as is (a redelivered build must not fail or start a second guest).
* ``destroy`` of a missing guest does nothing; it keeps the guest's instance files
  (a move still needs them), ``delete_instance_files`` removes them.
* power operations on a guest already in the target state do nothing;
  ``get_info`` and every power operation raise ``DomainNotFound`` for an
  unknown uuid, and ``HypervisorError`` when the guest's state forbids them.
* a suspended guest is shut off with its memory saved, and reports power state
  SHUTDOWN, as Nova's libvirt driver does.
* the move steps (``migrate_disk_and_power_off``, ``finish_migration``,
  ``confirm_migration``, ``finish_revert_migration``) and ``rescue``/``unrescue`` are
  safe to run again: each looks at what exists before acting. A shrinking resize is
  refused (``ResizeError``) before anything is touched.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Callable, Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

from novaq.exceptions import InvalidInput, ResizeError
from virt.event import LifecycleEvent
from virt.host_profile import validate_pci_address


def _require_int(spec: GuestSpec, field: str, minimum: int) -> None:
    value = getattr(spec, field)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidInput(
            reason=f"guest {spec.uuid}: {field} must be an integer >= {minimum}, not {value!r}"
        )


DISK_FORMATS: Final = ("raw", "qcow2")


def to_json_dict(value: Any) -> dict[str, Any]:
    """The one serialiser of the value objects below: a dataclass as a JSON-ready dict
    (tuples as lists, nested value objects as dicts)."""
    plain = _plain(asdict(value))
    assert isinstance(plain, dict)
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """The image a guest boots from, as the image registry (Glance's fields) describes it.

    ``location`` is where the image store keeps the data: an absolute file path or an
    ``http(s)://`` URL. ``checksum`` is the SHA-256 of that data in hex (empty: not
    verified); ``size`` is its length in bytes; ``virtual_size`` the disk size the data
    describes, in bytes (qcow2 can be larger than its file). ``properties`` are the
    image's properties (``hw_architecture``, ``hw_rescue_device``,
    ``os_shutdown_timeout``…) as sorted (name, value) string pairs, so the spec stays
    hashable and JSON-friendly.
    """

    id: str
    name: str
    location: str
    disk_format: str = "raw"
    checksum: str = ""
    size: int = 0
    virtual_size: int = 0
    properties: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidInput(reason="image id must be a non-empty string")
        if self.disk_format not in DISK_FORMATS:
            raise InvalidInput(
                reason=f"image {self.id}: disk_format must be one of {', '.join(DISK_FORMATS)}, "
                f"not {self.disk_format!r}"
            )

    def prop(self, name: str, default: str | None = None) -> str | None:
        """The value of property ``name``, or ``default``."""
        return dict(self.properties).get(name, default)

    def to_dict(self) -> dict[str, Any]:
        return {**to_json_dict(self), "properties": dict(self.properties)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ImageSpec:
        fields = dict(data)
        fields["properties"] = tuple(sorted(dict(fields.get("properties") or {}).items()))
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class GuestSpec:
    """What to start: sizes in MiB (memory, swap) and GiB (disks); ``image`` is None only
    for a guest with no image to boot (its root disk is created blank)."""

    uuid: str
    name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    ephemeral_gb: int = 0
    swap_mb: int = 0
    image: ImageSpec | None = None
    pci_addresses: tuple[str, ...] = ()
    display_name: str = ""
    flavor_name: str = ""

    def __post_init__(self) -> None:
        try:
            uuid_module.UUID(self.uuid)
        except (TypeError, ValueError, AttributeError) as exc:
            raise InvalidInput(reason=f"guest uuid {self.uuid!r} is not a UUID") from exc
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput(reason=f"guest {self.uuid}: name must be a non-empty string")
        for field in ("vcpus", "memory_mb"):
            _require_int(self, field, minimum=1)
        for field in ("root_gb", "ephemeral_gb", "swap_mb"):
            _require_int(self, field, minimum=0)
        if self.image is not None and not isinstance(self.image, ImageSpec):
            raise InvalidInput(reason=f"guest {self.uuid}: image must be an ImageSpec")
        if not isinstance(self.pci_addresses, tuple):
            raise InvalidInput(reason=f"guest {self.uuid}: pci_addresses must be a tuple")
        for address in self.pci_addresses:
            validate_pci_address(address)

    @property
    def image_id(self) -> str:
        """The image's id, or "" for a guest with no image."""
        return self.image.id if self.image is not None else ""

    def to_dict(self) -> dict[str, Any]:
        image = self.image.to_dict() if self.image is not None else None
        return {**to_json_dict(self), "image": image}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GuestSpec:
        fields = dict(data)
        fields["pci_addresses"] = tuple(fields.get("pci_addresses", ()))
        image = fields.get("image")
        fields["image"] = ImageSpec.from_dict(image) if isinstance(image, dict) else None
        return cls(**fields)


@dataclass(frozen=True, slots=True)
class PciDevice:
    """A PCI device the hypervisor reports; ids are 4 lower-case hex digits, no ``0x``."""

    address: str
    vendor_id: str
    product_id: str
    numa_node: int | None
    dev_type: str = "type-PCI"

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class HostResources:
    """A node's totals as the hypervisor sees them: MiB of memory, GiB of local disk."""

    hypervisor_hostname: str
    vcpus: int
    memory_mb: int
    local_gb: int
    hypervisor_type: str
    hypervisor_version: int
    cpu_info: dict[str, Any]
    pci_devices: tuple[PciDevice, ...]

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class HostCpuStats:
    """The host's CPU time since it started, in nanoseconds summed over its CPUs, by mode
    (``virNodeGetCPUStats`` of all CPUs), and its CPU frequency in MHz: what Nova's
    ``get_host_cpu_stats`` returns, for the ``cpu.virt_driver`` monitor."""

    user_ns: int
    kernel_ns: int
    idle_ns: int
    iowait_ns: int
    frequency_mhz: int

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


@dataclass(frozen=True, slots=True)
class GuestInfo:
    """The hypervisor's live view of one guest (``power_state`` from ``virt.power_state``)."""

    uuid: str
    name: str
    power_state: int
    vcpus: int
    memory_mb: int
    pci_addresses: tuple[str, ...]
    xml: str

    def to_dict(self) -> dict[str, Any]:
        return to_json_dict(self)


class GuestUsage(NamedTuple):
    """What a guest takes of its host, as the resource audit counts it: vCPUs and MiB of
    memory (its maximum, as ``GuestInfo``). A tuple: a host lists thousands at a time."""

    uuid: str
    vcpus: int
    memory_mb: int


@dataclass(frozen=True, slots=True)
class ImageCacheReport:
    """One pass of the image cache manager, by image (``image_ref``): base files kept
    because instances of this host use them, used images with no base file here,
    unused base files removed, and unused ones kept (younger than the minimum age, or
    removal turned off)."""

    in_use: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept_unused: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, list[str]]:
        return to_json_dict(self)


def check_can_resize(old: GuestSpec, new: GuestSpec) -> None:
    """Nova's refusal to shrink a guest's root or ephemeral disk (``ResizeError``)."""
    if new.root_gb < old.root_gb or new.ephemeral_gb < old.ephemeral_gb:
        raise ResizeError(reason="Unable to resize disk down.")


class ComputeDriver(Protocol):
    """What compute logic needs from a hypervisor; one instance per (process, URI)."""

    def init_host(self, host: str) -> None: ...

    def get_available_resource(self) -> HostResources: ...

    def get_available_nodes(self) -> list[str]: ...

    def get_host_cpu_stats(self) -> HostCpuStats:
        """The host's cumulative CPU times and frequency (simulated hosts: see
        ``virt.cpu_clock``)."""
        ...

    def list_instance_uuids(self) -> list[str]: ...

    def instance_exists(self, uuid: str) -> bool: ...

    def list_guest_usage(self) -> list[GuestUsage]:
        """vCPUs and memory of the guests, read in bulk without their domain XML (the
        resource audit's listing). Every guest ``list_instance_uuids`` lists is in it, and
        possibly guests of another owner or of none, whose ownership only the XML says:
        ``owns_guest`` tells, for the few a caller needs to know about."""
        ...

    def owns_guest(self, uuid: str) -> bool:
        """Whether guest ``uuid`` exists and is one ``list_instance_uuids`` lists."""
        ...

    def spawn(self, spec: GuestSpec) -> GuestInfo: ...

    def destroy(self, uuid: str) -> None: ...

    def get_info(self, uuid: str) -> GuestInfo: ...

    def block_stats(self, uuid: str) -> dict[str, dict[str, int]]:
        """I/O counters since the guest started, per disk target (``vda``): ``rd_req``,
        ``rd_bytes``, ``wr_req``, ``wr_bytes``. A guest that is not running has none
        (``{}``); a disk whose counters cannot be read is left out."""
        ...

    def guest_devices(self, uuid: str) -> dict[str, Any]:
        """What the guest is attached to, as JSON: ``disks`` (``target_dev``,
        ``source_path``, ``bus``), ``pci_devices`` (addresses), ``consoles`` (``type``,
        ``target_type``, ``port``)."""
        ...

    def power_off(self, uuid: str, timeout_s: float = 0) -> None:
        """Stop the guest. ``timeout_s`` > 0: a clean shutdown (ACPI) waited for up to
        that long first, then destroy (Nova's ``power_off(timeout, retry_interval)``);
        0: destroy at once."""
        ...

    def power_on(self, uuid: str) -> None: ...

    def reboot(self, spec: GuestSpec, hard: bool) -> None:
        """Soft: a clean shutdown waited for, then a new boot, falling back to hard when
        the guest does not go down in time (never a reboot only asked for). Hard: off,
        the guest defined again from ``spec``, booted."""
        ...

    def get_console_output(self, uuid: str, length: int | None = None) -> str:
        """The tail of the guest's console log (at most 100 KiB, then the last ``length``
        lines); "" when nothing was logged yet."""
        ...

    def pause(self, uuid: str) -> None: ...

    def unpause(self, uuid: str) -> None: ...

    def suspend(self, uuid: str) -> None: ...

    def resume(self, uuid: str) -> None: ...

    def trigger_crash_dump(self, uuid: str) -> None:
        """Inject a non-maskable interrupt into the running or paused guest (what the
        guest does with it, a kernel crash dump or a log line, is its own configuration).
        ``InstanceNotRunning`` when it is off, ``TriggerCrashDumpNotSupported`` when the
        hypervisor cannot."""
        ...

    # -- instance files and the image cache (Nova's libvirt instances_path) --------

    def instance_files_exist(self, uuid: str) -> bool:
        """Whether this host still holds files of guest ``uuid`` (its instance directory)."""
        ...

    def delete_instance_files(self, uuid: str) -> bool:
        """Remove guest ``uuid``'s instance directory; True when it is gone (Nova's).
        Never touches the guest itself: ``destroy`` keeps the files, as a move needs."""
        ...

    def manage_image_cache(
        self,
        images_in_use: Collection[str],
        *,
        remove_unused: bool,
        min_age_s: int,
        known_images: Collection[str] = (),
    ) -> ImageCacheReport:
        """One pass of the image cache manager over this host's base images: those in
        ``images_in_use`` are kept (and marked used now); the others, when
        ``remove_unused``, are removed once unused for ``min_age_s`` seconds. An unused
        base file is reported by its image id when that id is in ``known_images``."""
        ...

    # -- moving disks: resize, cold migration, rescue (Nova's driver methods) ----------

    @property
    def instances_path(self) -> Path:
        """Where this host keeps instance directories; a move's source without a disk
        endpoint copies disks to the destination's (recorded by prep_resize, which runs
        there)."""
        ...

    def migrate_disk_and_power_off(
        self, spec: GuestSpec, new_spec: GuestSpec, dest_instances_path: str | None
    ) -> None:
        """On the source: ``ResizeError`` (nothing touched) if ``new_spec`` shrinks a disk;
        else the guest goes down, its files are kept aside until confirm or revert and,
        given a local ``dest_instances_path``, its disks copied there (None: the
        destination pulls them from this host's disk endpoint). Safe to run again."""
        ...

    def finish_migration(
        self, spec: GuestSpec, power_on: bool, disks_from: str | None = None
    ) -> GuestInfo:
        """On the destination: the disks pulled from the source's disk endpoint
        ``disks_from`` (None: copied here already), grown to ``spec``, the guest defined
        and, when ``power_on``, started. A guest already defined is only started."""
        ...

    def confirm_migration(self, uuid: str) -> None:
        """On the source: remove the files kept for a revert."""
        ...

    def finish_revert_migration(self, spec: GuestSpec, power_on: bool) -> GuestInfo:
        """On the source: the kept files back in place, the guest defined from ``spec``
        (old flavor) on its original disks and, when ``power_on``, started."""
        ...

    def rescue(self, spec: GuestSpec, rescue_image: ImageSpec | None) -> GuestInfo:
        """Boot the guest from ``rescue_image`` with its root disk attached second; the
        guest's own definition is kept for ``unrescue``. The rescued guest runs."""
        ...

    def unrescue(self, uuid: str) -> GuestInfo:
        """The guest's own definition back, started; the rescue disk removed."""
        ...

    def register_event_listener(
        self, listener: Callable[[LifecycleEvent], None] | None, delay_s: float = 15.0
    ) -> None:
        """Hand the hypervisor's guest lifecycle events (``virt.event``) to ``listener``
        on a thread of the driver's, STOPPED ones ``delay_s`` late unless another event of
        the guest cancels them (Nova's); None stops them."""
        ...

    def close(self) -> None: ...
