"""libvirt XML objects for guest domains: the domain, its OS, devices and metadata.

(Capabilities: ``config_caps``; CPU, clock, serial, balloon: ``config_platform``.)
Each class mirrors one libvirt element with ``to_element()``/``from_element()``
(lxml) and writes its children in a fixed order, so generated XML is stable
enough for golden files. No policy here: no defaults chosen for a guest, no
libvirt calls, no string formatting of values. ``from_element`` reads what it
models and ignores the elements libvirt adds (controllers, addresses, aliases, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Self

from lxml import etree

from virt.libvirt.config_base import (
    LibvirtConfigObject,
    _attr,
    _leaf,
    _required,
    _text,
    memory_kib,
)
from virt.libvirt.config_platform import (
    LibvirtConfigGuestClock,
    LibvirtConfigGuestCPU,
    LibvirtConfigGuestMemBalloon,
    LibvirtConfigGuestSerial,
    LibvirtConfigGuestTimer,
)

__all__ = [
    "LibvirtConfigGuestClock",
    "LibvirtConfigGuestCPU",
    "LibvirtConfigGuestMemBalloon",
    "LibvirtConfigGuestSerial",
    "LibvirtConfigGuestTimer",
    "LibvirtConfigObject",
    "memory_kib",
]

NOVAQ_NS: Final = "urn:novaq:libvirt:instance:1.0"


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestDisk(LibvirtConfigObject):
    """``<disk type='file'>``: a file-backed disk."""

    root_name: ClassVar[str] = "disk"

    source_path: str
    target_dev: str
    target_bus: str
    driver_name: str
    driver_type: str
    device: str = "disk"

    def to_element(self) -> etree._Element:
        disk = etree.Element(self.root_name, type="file", device=self.device)
        etree.SubElement(disk, "driver", name=self.driver_name, type=self.driver_type)
        etree.SubElement(disk, "source", file=self.source_path)
        etree.SubElement(disk, "target", dev=self.target_dev, bus=self.target_bus)
        return disk

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        driver = _required(element, "driver")
        target = _required(element, "target")
        return cls(
            source_path=_attr(_required(element, "source"), "file"),
            target_dev=_attr(target, "dev"),
            target_bus=_attr(target, "bus"),
            driver_name=_attr(driver, "name"),
            driver_type=_attr(driver, "type"),
            device=element.get("device", "disk"),
        )


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestConsole(LibvirtConfigObject):
    """``<console>`` on a character device (``pty``) with a serial target."""

    root_name: ClassVar[str] = "console"

    type: str = "pty"
    target_type: str = "serial"
    target_port: int = 0

    def to_element(self) -> etree._Element:
        console = etree.Element(self.root_name, type=self.type)
        etree.SubElement(console, "target", type=self.target_type, port=str(self.target_port))
        return console

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        target = _required(element, "target")
        return cls(
            type=_attr(element, "type"),
            target_type=target.get("type", "serial"),
            target_port=int(target.get("port", "0")),
        )


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestHostdevPCI(LibvirtConfigObject):
    """``<hostdev mode='subsystem' type='pci'>``: a host PCI device passed through."""

    root_name: ClassVar[str] = "hostdev"

    domain: int
    bus: int
    slot: int
    function: int
    managed: bool = True

    @classmethod
    def from_address(cls, address: str, managed: bool = True) -> Self:
        """From a ``0000:08:00.0`` address."""
        domain, bus, slot_function = address.split(":")
        slot, function = slot_function.split(".")
        return cls(int(domain, 16), int(bus, 16), int(slot, 16), int(function, 16), managed)

    @property
    def address(self) -> str:
        """The ``0000:08:00.0`` form."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.slot:02x}.{self.function:x}"

    def to_element(self) -> etree._Element:
        hostdev = etree.Element(
            self.root_name, mode="subsystem", type="pci", managed="yes" if self.managed else "no"
        )
        source = etree.SubElement(hostdev, "source")
        etree.SubElement(
            source,
            "address",
            domain=f"0x{self.domain:04x}",
            bus=f"0x{self.bus:02x}",
            slot=f"0x{self.slot:02x}",
            function=f"0x{self.function:x}",
        )
        return hostdev

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        address = _required(element, "source/address")
        return cls(
            domain=int(_attr(address, "domain"), 0),
            bus=int(_attr(address, "bus"), 0),
            slot=int(_attr(address, "slot"), 0),
            function=int(_attr(address, "function"), 0),
            managed=element.get("managed", "no") == "yes",
        )


GuestDevice = (
    LibvirtConfigGuestDisk
    | LibvirtConfigGuestSerial
    | LibvirtConfigGuestConsole
    | LibvirtConfigGuestHostdevPCI
    | LibvirtConfigGuestMemBalloon
)


def _device_from_element(element: etree._Element) -> GuestDevice | None:
    if element.tag == "disk" and element.get("type") == "file":
        return LibvirtConfigGuestDisk.from_element(element)
    if element.tag == "console":
        return LibvirtConfigGuestConsole.from_element(element)
    if element.tag == "hostdev" and element.get("type") == "pci":
        return LibvirtConfigGuestHostdevPCI.from_element(element)
    if element.tag == "serial":
        return LibvirtConfigGuestSerial.from_element(element)
    if element.tag == "memballoon":
        return LibvirtConfigGuestMemBalloon.from_element(element)
    return None


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestOS(LibvirtConfigObject):
    """``<os>``: guest OS type, architecture and boot devices."""

    root_name: ClassVar[str] = "os"

    type: str = "hvm"
    arch: str | None = None
    boot_devs: tuple[str, ...] = ("hd",)

    def to_element(self) -> etree._Element:
        os_element = etree.Element(self.root_name)
        os_type = _leaf(os_element, "type", self.type)
        if self.arch is not None:
            os_type.set("arch", self.arch)
        for dev in self.boot_devs:
            etree.SubElement(os_element, "boot", dev=dev)
        return os_element

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        os_type = _required(element, "type")
        return cls(
            type=os_type.text or "",
            arch=os_type.get("arch"),
            boot_devs=tuple(_attr(boot, "dev") for boot in element.findall("boot")),
        )


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuestMetadata(LibvirtConfigObject):
    """novaq's ``<metadata>`` entry (Nova's ``<nova:instance>``): the server's display
    name, the compute host that owns the guest (None: not recorded), the flavor and its
    sizes (MiB of memory and swap, GiB of disks) and the image id."""

    root_name: ClassVar[str] = "metadata"

    image: str
    root_gb: int
    ephemeral_gb: int = 0
    swap_mb: int = 0
    display_name: str = ""
    host: str | None = None
    flavor_name: str = ""
    vcpus: int = 0
    memory_mb: int = 0

    def to_element(self) -> etree._Element:
        metadata = etree.Element(self.root_name)
        instance = etree.SubElement(metadata, _novaq("instance"), nsmap={"novaq": NOVAQ_NS})
        _leaf(instance, _novaq("name"), self.display_name)
        if self.host is not None:
            _leaf(instance, _novaq("host"), self.host)
        etree.SubElement(
            instance,
            _novaq("flavor"),
            name=self.flavor_name,
            vcpus=str(self.vcpus),
            memory_mb=str(self.memory_mb),
            root_gb=str(self.root_gb),
            ephemeral_gb=str(self.ephemeral_gb),
            swap_mb=str(self.swap_mb),
        )
        _leaf(instance, _novaq("image"), self.image)
        return metadata

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        instance = _required(element, _novaq("instance"))
        flavor = _required(instance, _novaq("flavor"))
        host = instance.find(_novaq("host"))
        return cls(
            image=_text(instance, _novaq("image")),
            root_gb=int(_attr(flavor, "root_gb")),
            ephemeral_gb=int(_attr(flavor, "ephemeral_gb")),
            swap_mb=int(_attr(flavor, "swap_mb")),
            display_name=instance.findtext(_novaq("name")) or "",
            host=(host.text or "") if host is not None else None,
            flavor_name=_attr(flavor, "name"),
            vcpus=int(_attr(flavor, "vcpus")),
            memory_mb=int(_attr(flavor, "memory_mb")),
        )

    @classmethod
    def find_in(cls, domain: etree._Element) -> Self | None:
        """The novaq entry of a domain's ``<metadata>``, if it has one."""
        metadata = domain.find("metadata")
        if metadata is None or metadata.find(_novaq("instance")) is None:
            return None
        return cls.from_element(metadata)


def _novaq(tag: str) -> str:
    return f"{{{NOVAQ_NS}}}{tag}"


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuest(LibvirtConfigObject):
    """``<domain>``: memory in KiB; ``features`` are the names of empty feature elements
    (``acpi``, ``apic``); ``on_*`` what libvirt does when the guest powers off, reboots
    or crashes; devices written in the order given."""

    root_name: ClassVar[str] = "domain"

    virt_type: str
    name: str
    uuid: str
    memory_kib: int
    vcpus: int
    os: LibvirtConfigGuestOS
    metadata: LibvirtConfigGuestMetadata | None = None
    features: tuple[str, ...] = ()
    cpu: LibvirtConfigGuestCPU | None = None
    clock: LibvirtConfigGuestClock | None = None
    on_poweroff: str | None = None
    on_reboot: str | None = None
    on_crash: str | None = None
    devices: tuple[GuestDevice, ...] = ()

    def to_element(self) -> etree._Element:
        domain = etree.Element(self.root_name, type=self.virt_type)
        _leaf(domain, "name", self.name)
        _leaf(domain, "uuid", self.uuid)
        if self.metadata is not None:
            domain.append(self.metadata.to_element())
        _leaf(domain, "memory", self.memory_kib, unit="KiB")
        _leaf(domain, "vcpu", self.vcpus)
        domain.append(self.os.to_element())
        if self.features:
            features = etree.SubElement(domain, "features")
            for feature in self.features:
                etree.SubElement(features, feature)
        for part in (self.cpu, self.clock):
            if part is not None:
                domain.append(part.to_element())
        for tag in ("on_poweroff", "on_reboot", "on_crash"):
            action = getattr(self, tag)
            if action is not None:
                _leaf(domain, tag, action)
        devices = etree.SubElement(domain, "devices")
        for device in self.devices:
            devices.append(device.to_element())
        return domain

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        devices = element.find("devices")
        parsed = [_device_from_element(child) for child in (devices if devices is not None else ())]
        features = element.find("features")
        cpu, clock = element.find("cpu"), element.find("clock")
        return cls(
            virt_type=_attr(element, "type"),
            name=_text(element, "name"),
            uuid=_text(element, "uuid"),
            memory_kib=memory_kib(_required(element, "memory")),
            vcpus=int(_text(element, "vcpu")),
            os=LibvirtConfigGuestOS.from_element(_required(element, "os")),
            metadata=LibvirtConfigGuestMetadata.find_in(element),
            features=tuple(str(f.tag) for f in features) if features is not None else (),
            cpu=LibvirtConfigGuestCPU.from_element(cpu) if cpu is not None else None,
            clock=LibvirtConfigGuestClock.from_element(clock) if clock is not None else None,
            on_poweroff=element.findtext("on_poweroff"),
            on_reboot=element.findtext("on_reboot"),
            on_crash=element.findtext("on_crash"),
            devices=tuple(device for device in parsed if device is not None),
        )

    @property
    def hostdevs(self) -> tuple[LibvirtConfigGuestHostdevPCI, ...]:
        return tuple(d for d in self.devices if isinstance(d, LibvirtConfigGuestHostdevPCI))

    @staticmethod
    def pci_addresses_in(xml: str) -> tuple[str, ...]:
        """``from_xml(xml).hostdevs``' addresses, reading only the ``<hostdev>`` elements
        (issue 16: a guest's info read the whole domain at every spawn for them); none
        without parsing when the XML has no ``<hostdev`` at all (most guests)."""
        if "<hostdev" not in xml:
            return ()
        devices = etree.fromstring(xml.encode()).find("devices")
        return tuple(
            LibvirtConfigGuestHostdevPCI.from_element(child).address
            for child in (devices if devices is not None else ())
            if child.tag == "hostdev" and child.get("type") == "pci"
        )

    @property
    def disks(self) -> tuple[LibvirtConfigGuestDisk, ...]:
        return tuple(d for d in self.devices if isinstance(d, LibvirtConfigGuestDisk))

    @property
    def serial_log_file(self) -> str | None:
        """Where the first logged serial port writes the guest's console (``console.log``)."""
        return next(
            (d.log_file for d in self.devices if isinstance(d, LibvirtConfigGuestSerial)), None
        )
