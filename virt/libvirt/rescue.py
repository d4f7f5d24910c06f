"""The rescue domain: Nova's legacy libvirt rescue disk layout.

A rescued guest boots from ``disk.rescue`` (an overlay of the rescue image) as its first
disk, with its own root disk attached second so the rescue system can repair it; the
ephemeral and swap disks are left out, as Nova's rescue mapping leaves them. The rescue
disk's device and bus come from the rescue image's ``hw_rescue_device`` (``disk`` or
``cdrom``) and ``hw_rescue_bus`` properties; by default a virtio disk. Everything else in
the domain is what the guest's own XML says, so this module only swaps the ``<disk>``
elements of that XML. Refuses to decide when or how the domain is (re)defined: that is
``LibvirtDriver.rescue``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from lxml import etree

from novaq.exceptions import HypervisorError
from virt.driver import ImageSpec
from virt.libvirt.config import LibvirtConfigGuestDisk

UNRESCUE_XML: Final = "unrescue.xml"
RESCUE_DISK: Final = "disk.rescue"
_PREFIX_BY_BUS: Final = {"virtio": "vd", "ide": "hd", "scsi": "sd", "sata": "sd", "usb": "sd"}
_DEFAULT_BUS: Final = {"disk": "virtio", "cdrom": "ide"}


def design_rescue_disks(
    directory: Path, rescue_image: ImageSpec | None
) -> tuple[LibvirtConfigGuestDisk, LibvirtConfigGuestDisk]:
    """The rescue disk, then the guest's root disk."""
    device = _prop(rescue_image, "hw_rescue_device") or "disk"
    if device not in _DEFAULT_BUS:
        raise HypervisorError(reason=f"unsupported hw_rescue_device {device!r}")
    bus = _prop(rescue_image, "hw_rescue_bus") or _DEFAULT_BUS[device]
    if bus not in _PREFIX_BY_BUS or (device == "cdrom" and bus == "virtio"):
        raise HypervisorError(reason=f"unsupported hw_rescue_bus {bus!r} for a {device}")
    prefix = _PREFIX_BY_BUS[bus]
    rescue = LibvirtConfigGuestDisk(
        source_path=str(directory / RESCUE_DISK),
        target_dev=prefix + "a",
        target_bus=bus,
        driver_name="qemu",
        driver_type="qcow2",
        device=device,
    )
    root = LibvirtConfigGuestDisk(
        source_path=str(directory / "disk"),
        target_dev="vdb" if prefix == "vd" else "vda",
        target_bus="virtio",
        driver_name="qemu",
        driver_type="qcow2",
    )
    return rescue, root


def _prop(image: ImageSpec | None, name: str) -> str | None:
    return image.prop(name) if image is not None else None


def with_disks(domain_xml: str, disks: tuple[LibvirtConfigGuestDisk, ...]) -> str:
    """``domain_xml`` with its ``<disk>`` elements replaced by ``disks``, in their place."""
    root = etree.fromstring(domain_xml.encode())
    devices = root.find("devices")
    if devices is None:
        raise HypervisorError(reason="domain XML has no <devices>")
    old = devices.findall("disk")
    position = list(devices).index(old[0]) if old else 0
    for element in old:
        devices.remove(element)
    for offset, disk in enumerate(disks):
        devices.insert(position + offset, disk.to_element())
    return etree.tostring(root, encoding="unicode")


def is_rescue_domain(disk_paths: list[str]) -> bool:
    """Whether a domain with these disk sources is a rescue domain."""
    return any(Path(path).name == RESCUE_DISK for path in disk_paths)
