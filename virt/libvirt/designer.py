"""Policy for guest XML: which config objects a ``GuestSpec`` becomes on a hypervisor.

Owns the choices: domain type and architecture from the connection's
capabilities (``kvm`` when offered, then ``qemu``, else whatever the hypervisor
offers, e.g. ``test``), disk files under ``<instances_path>/<uuid>/``, virtio
disks, a serial console, one managed ``<hostdev>`` per requested PCI address.
Refuses to build XML itself (``config`` does) or to talk to libvirt (``host``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from novaq.exceptions import HypervisorError
from virt.driver import GuestSpec
from virt.libvirt.config import (
    GuestDevice,
    LibvirtConfigCaps,
    LibvirtConfigGuest,
    LibvirtConfigGuestConsole,
    LibvirtConfigGuestDisk,
    LibvirtConfigGuestHostdevPCI,
    LibvirtConfigGuestMetadata,
    LibvirtConfigGuestOS,
)

DEFAULT_INSTANCES_PATH: Final = Path("/var/lib/novaq/instances")
PREFERRED_DOMAIN_TYPES: Final = ("kvm", "qemu")
DISK_BUS: Final = "virtio"
DISK_FORMAT: Final = "qcow2"


@dataclass(frozen=True, slots=True)
class GuestPlatform:
    """What kind of guest the hypervisor runs: ``<domain type>`` and ``<os><type arch>``."""

    virt_type: str
    arch: str
    os_type: str = "hvm"


def choose_platform(caps: LibvirtConfigCaps) -> GuestPlatform:
    """The best hvm guest of the host's own arch: kvm, then qemu, then the first offered."""
    hvm = [guest for guest in caps.guests if guest.os_type == "hvm" and guest.domain_types]
    if not hvm:
        raise HypervisorError(reason="the hypervisor offers no hvm guest")
    native = [guest for guest in hvm if guest.arch == caps.host_arch] or hvm
    for preferred in PREFERRED_DOMAIN_TYPES:
        for guest in native:
            if preferred in guest.domain_types:
                return GuestPlatform(virt_type=preferred, arch=guest.arch)
    return GuestPlatform(virt_type=native[0].domain_types[0], arch=native[0].arch)


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


def design_guest(
    spec: GuestSpec, platform: GuestPlatform, instances_path: Path = DEFAULT_INSTANCES_PATH
) -> LibvirtConfigGuest:
    """The full domain config of ``spec`` on ``platform``."""
    devices: tuple[GuestDevice, ...] = (
        *design_disks(spec, instances_path),
        LibvirtConfigGuestConsole(),
        *design_hostdevs(spec),
    )
    return LibvirtConfigGuest(
        virt_type=platform.virt_type,
        name=spec.name,
        uuid=spec.uuid,
        memory_kib=spec.memory_mb * 1024,
        vcpus=spec.vcpus,
        os=LibvirtConfigGuestOS(type=platform.os_type, arch=platform.arch),
        metadata=LibvirtConfigGuestMetadata(
            image=spec.image_id,
            root_gb=spec.root_gb,
            ephemeral_gb=spec.ephemeral_gb,
            swap_mb=spec.swap_mb,
        ),
        devices=devices,
    )
