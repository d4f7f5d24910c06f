"""Policy for guest XML: which config objects a ``GuestSpec`` becomes on a hypervisor.

Owns the choices, as Nova's libvirt driver makes them:

* domain type and architecture: ``[libvirt] virt_type`` on the host's own arch, refused
  with a ``ConfigError`` naming the option when libvirt does not offer it; with no
  virt_type (a ``test:///`` URI, see ``options``) the best offered: kvm, qemu, else the
  first (``test``);
* ``<cpu>`` from ``cpu_mode`` (default host-model under kvm, none otherwise) and
  ``cpu_models`` for ``custom``;
* for x86 hvm guests ``<features>`` acpi and apic (without them a guest sees one CPU
  and ignores the ACPI power button) and Nova's clock: utc, pit ``delay``, rtc
  ``catchup``, hpet off;
* ``on_poweroff`` destroy, ``on_reboot`` restart, ``on_crash`` destroy;
* disk files under ``<instances_path>/<uuid>/``, virtio disks; a pty serial port logged
  to ``<instances_path>/<uuid>/console.log`` (virtlogd writes it, ``append`` off) plus a
  pty console on it; one managed ``<hostdev>`` per requested PCI address; a virtio
  memory balloon with ``mem_stats_period_seconds`` statistics;
* ``<metadata>``: display name, owning compute host, flavor and sizes, image id.

Refuses to build XML itself (``config`` does) or to talk to libvirt (``host``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from novaq.exceptions import ConfigError, HypervisorError
from virt.driver import GuestSpec
from virt.libvirt.config import (
    GuestDevice,
    LibvirtConfigGuest,
    LibvirtConfigGuestConsole,
    LibvirtConfigGuestDisk,
    LibvirtConfigGuestHostdevPCI,
    LibvirtConfigGuestMetadata,
    LibvirtConfigGuestOS,
)
from virt.libvirt.config_caps import LibvirtConfigCaps, LibvirtConfigCapsGuest
from virt.libvirt.config_platform import (
    LibvirtConfigGuestClock,
    LibvirtConfigGuestCPU,
    LibvirtConfigGuestMemBalloon,
    LibvirtConfigGuestSerial,
    LibvirtConfigGuestTimer,
)
from virt.libvirt.options import GuestOptions

DEFAULT_INSTANCES_PATH: Final = Path("/var/lib/novaq/instances")
PREFERRED_DOMAIN_TYPES: Final = ("kvm", "qemu")
DISK_BUS: Final = "virtio"
DISK_FORMAT: Final = "qcow2"
CONSOLE_LOG: Final = "console.log"
DEFAULT_OPTIONS: Final = GuestOptions()
X86_ARCHES: Final = ("i686", "x86_64")
#: Nova's x86 timers: the PIT delays lost ticks, the RTC catches up, no HPET.
X86_TIMERS: Final = (
    LibvirtConfigGuestTimer("pit", tickpolicy="delay"),
    LibvirtConfigGuestTimer("rtc", tickpolicy="catchup"),
    LibvirtConfigGuestTimer("hpet", present=False),
)


@dataclass(frozen=True, slots=True)
class GuestPlatform:
    """What kind of guest the hypervisor runs: ``<domain type>`` and ``<os><type arch>``."""

    virt_type: str
    arch: str
    os_type: str = "hvm"


def choose_platform(caps: LibvirtConfigCaps, virt_type: str | None = None) -> GuestPlatform:
    """The hvm guest of the host's own arch of domain type ``virt_type``; with None, the
    best offered: kvm, then qemu, then the first. ``ConfigError`` when libvirt does not
    offer ``virt_type`` (Nova's "is virt_type set correctly?")."""
    hvm = [guest for guest in caps.guests if guest.os_type == "hvm" and guest.domain_types]
    if not hvm:
        raise HypervisorError(reason="the hypervisor offers no hvm guest")
    native = [guest for guest in hvm if guest.arch == caps.host_arch] or hvm
    wanted = (virt_type,) if virt_type is not None else PREFERRED_DOMAIN_TYPES
    for preferred in wanted:
        for guest in native:
            if preferred in guest.domain_types:
                return GuestPlatform(virt_type=preferred, arch=guest.arch)
    if virt_type is not None:
        raise ConfigError(option="[libvirt] virt_type", reason=_not_offered(virt_type, native))
    return GuestPlatform(virt_type=native[0].domain_types[0], arch=native[0].arch)


def _not_offered(virt_type: str, guests: list[LibvirtConfigCapsGuest]) -> str:
    offered = sorted({f"{t} ({g.arch})" for g in guests for t in g.domain_types})
    return (
        f"libvirt offers no '{virt_type}' domain for hvm guests of this host "
        f"(it offers: {', '.join(offered)}); is virt_type set correctly?"
    )


def instance_dir(instances_path: Path, uuid: str) -> Path:
    """Where a guest's disk files live."""
    return instances_path / uuid


def _disk(path: Path, index: int) -> LibvirtConfigGuestDisk:
    return LibvirtConfigGuestDisk(
        source_path=str(path),
        target_dev="vd" + chr(ord("a") + index),
        target_bus=DISK_BUS,
        driver_name="qemu",
        driver_type=DISK_FORMAT,
    )


def design_disks(spec: GuestSpec, instances_path: Path) -> tuple[LibvirtConfigGuestDisk, ...]:
    """Root disk, then the ephemeral and swap disks the flavor asks for, as Nova names them."""
    directory = instance_dir(instances_path, spec.uuid)
    names = ["disk"]
    if spec.ephemeral_gb:
        names.append("disk.eph0")
    if spec.swap_mb:
        names.append("disk.swap")
    return tuple(_disk(directory / name, index) for index, name in enumerate(names))


def design_hostdevs(spec: GuestSpec) -> tuple[LibvirtConfigGuestHostdevPCI, ...]:
    """One managed PCI passthrough device per requested address, in request order."""
    return tuple(LibvirtConfigGuestHostdevPCI.from_address(a) for a in spec.pci_addresses)


def console_log_path(instances_path: Path, uuid: str) -> Path:
    """Where the guest's serial console is logged (Nova's ``console.log``)."""
    return instance_dir(instances_path, uuid) / CONSOLE_LOG


def design_cpu(platform: GuestPlatform, options: GuestOptions) -> LibvirtConfigGuestCPU | None:
    """Nova's ``cpu_mode``: host-model by default under kvm, none otherwise (no ``<cpu>``:
    the hypervisor's default model, which is what TCG runs best)."""
    mode = options.cpu_mode
    if mode is None:
        mode = "host-model" if platform.virt_type == "kvm" else "none"
    if mode == "none":
        return None
    if mode == "custom":
        return LibvirtConfigGuestCPU(mode="custom", model=options.cpu_models[0], match="exact")
    return LibvirtConfigGuestCPU(mode=mode)


def design_clock(platform: GuestPlatform) -> LibvirtConfigGuestClock:
    timers = X86_TIMERS if platform.arch in X86_ARCHES else ()
    return LibvirtConfigGuestClock(offset="utc", timers=timers)


def design_features(platform: GuestPlatform) -> tuple[str, ...]:
    return ("acpi", "apic") if platform.arch in X86_ARCHES and platform.os_type == "hvm" else ()


def design_consoles(spec: GuestSpec, instances_path: Path) -> tuple[GuestDevice, ...]:
    """A pty serial port logged to ``console.log``, and the console on it."""
    log = str(console_log_path(instances_path, spec.uuid))
    return (LibvirtConfigGuestSerial(type="pty", log_file=log), LibvirtConfigGuestConsole())


def design_metadata(spec: GuestSpec, host: str | None) -> LibvirtConfigGuestMetadata:
    return LibvirtConfigGuestMetadata(
        image=spec.image_id,
        root_gb=spec.root_gb,
        ephemeral_gb=spec.ephemeral_gb,
        swap_mb=spec.swap_mb,
        display_name=spec.display_name,
        host=host,
        flavor_name=spec.flavor_name,
        vcpus=spec.vcpus,
        memory_mb=spec.memory_mb,
    )


def design_guest(
    spec: GuestSpec,
    platform: GuestPlatform,
    instances_path: Path = DEFAULT_INSTANCES_PATH,
    *,
    options: GuestOptions = DEFAULT_OPTIONS,
    host: str | None = None,
) -> LibvirtConfigGuest:
    """The full domain config of ``spec`` on ``platform``, owned by compute ``host``."""
    devices: tuple[GuestDevice, ...] = (
        *design_disks(spec, instances_path),
        *design_consoles(spec, instances_path),
        *design_hostdevs(spec),
        LibvirtConfigGuestMemBalloon(model="virtio", period_s=options.mem_stats_period_seconds),
    )
    return LibvirtConfigGuest(
        virt_type=platform.virt_type,
        name=spec.name,
        uuid=spec.uuid,
        memory_kib=spec.memory_mb * 1024,
        vcpus=spec.vcpus,
        os=LibvirtConfigGuestOS(type=platform.os_type, arch=platform.arch),
        metadata=design_metadata(spec, host),
        features=design_features(platform),
        cpu=design_cpu(platform, options),
        clock=design_clock(platform),
        on_poweroff="destroy",
        on_reboot="restart",
        on_crash="destroy",
        devices=devices,
    )
