"""libvirt XML objects: guest domain XML and the capabilities the designer reads.

Each class mirrors one libvirt element with ``to_element()``/``from_element()``
(lxml) and writes its children in a fixed order, so generated XML is stable
enough for golden files. No policy here: no defaults chosen for a guest, no
libvirt calls, no string formatting of values. ``from_element`` reads what it
models and ignores the elements libvirt adds (``<serial>``, ``<clock>``, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final, Self

from lxml import etree

NOVAQ_NS: Final = "urn:novaq:libvirt:instance:1.0"
_MEMORY_UNITS: Final[dict[str, int]] = {
    "b": 1,
    "bytes": 1,
    "KiB": 1024,
    "k": 1024,
    "MiB": 1024**2,
    "M": 1024**2,
    "GiB": 1024**3,
    "G": 1024**3,
}


def _leaf(parent: etree._Element, tag: str, text: object, **attrs: str) -> etree._Element:
    element = etree.SubElement(parent, tag, attrs)
    element.text = str(text)
    return element


def _required(element: etree._Element, path: str) -> etree._Element:
    found = element.find(path)
    if found is None:
        raise ValueError(f"<{element.tag}> has no {path}")
    return found


def _text(element: etree._Element, path: str) -> str:
    return _required(element, path).text or ""


def _attr(element: etree._Element, name: str) -> str:
    value = element.get(name)
    if value is None:
        raise ValueError(f"<{element.tag}> has no {name} attribute")
    return value


def memory_kib(element: etree._Element) -> int:
    """A libvirt memory element (``unit`` attribute, KiB by default) in KiB."""
    scale = _MEMORY_UNITS[element.get("unit", "KiB")]
    return int(element.text or "0") * scale // 1024


class LibvirtConfigObject:
    """An XML object: ``to_element()``, ``from_element()`` and their string forms."""

    root_name: ClassVar[str]

    def to_element(self) -> etree._Element:
        raise NotImplementedError

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        raise NotImplementedError

    def to_xml(self) -> str:
        return etree.tostring(self.to_element(), pretty_print=True, encoding="unicode")

    @classmethod
    def from_xml(cls, xml: str) -> Self:
        return cls.from_element(etree.fromstring(xml.encode()))


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


GuestDevice = LibvirtConfigGuestDisk | LibvirtConfigGuestConsole | LibvirtConfigGuestHostdevPCI


def _device_from_element(element: etree._Element) -> GuestDevice | None:
    if element.tag == "disk" and element.get("type") == "file":
        return LibvirtConfigGuestDisk.from_element(element)
    if element.tag == "console":
        return LibvirtConfigGuestConsole.from_element(element)
    if element.tag == "hostdev" and element.get("type") == "pci":
        return LibvirtConfigGuestHostdevPCI.from_element(element)
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
    """novaq's ``<metadata>`` entry: where the guest came from (image, sizes in GiB/MiB)."""

    root_name: ClassVar[str] = "metadata"

    image: str
    root_gb: int
    ephemeral_gb: int = 0
    swap_mb: int = 0

    def to_element(self) -> etree._Element:
        metadata = etree.Element(self.root_name)
        instance = etree.SubElement(metadata, f"{{{NOVAQ_NS}}}instance", nsmap={"novaq": NOVAQ_NS})
        _leaf(instance, f"{{{NOVAQ_NS}}}image", self.image)
        etree.SubElement(
            instance,
            f"{{{NOVAQ_NS}}}disks",
            root_gb=str(self.root_gb),
            ephemeral_gb=str(self.ephemeral_gb),
            swap_mb=str(self.swap_mb),
        )
        return metadata

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        instance = _required(element, f"{{{NOVAQ_NS}}}instance")
        disks = _required(instance, f"{{{NOVAQ_NS}}}disks")
        return cls(
            image=_text(instance, f"{{{NOVAQ_NS}}}image"),
            root_gb=int(_attr(disks, "root_gb")),
            ephemeral_gb=int(_attr(disks, "ephemeral_gb")),
            swap_mb=int(_attr(disks, "swap_mb")),
        )

    @classmethod
    def find_in(cls, domain: etree._Element) -> Self | None:
        """The novaq entry of a domain's ``<metadata>``, if it has one."""
        metadata = domain.find("metadata")
        if metadata is None or metadata.find(f"{{{NOVAQ_NS}}}instance") is None:
            return None
        return cls.from_element(metadata)


@dataclass(frozen=True, slots=True)
class LibvirtConfigGuest(LibvirtConfigObject):
    """``<domain>``: memory in KiB; devices written in the order given."""

    root_name: ClassVar[str] = "domain"

    virt_type: str
    name: str
    uuid: str
    memory_kib: int
    vcpus: int
    os: LibvirtConfigGuestOS
    metadata: LibvirtConfigGuestMetadata | None = None
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
        devices = etree.SubElement(domain, "devices")
        for device in self.devices:
            devices.append(device.to_element())
        return domain

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        devices = element.find("devices")
        parsed = [_device_from_element(child) for child in (devices if devices is not None else ())]
        return cls(
            virt_type=_attr(element, "type"),
            name=_text(element, "name"),
            uuid=_text(element, "uuid"),
            memory_kib=memory_kib(_required(element, "memory")),
            vcpus=int(_text(element, "vcpu")),
            os=LibvirtConfigGuestOS.from_element(_required(element, "os")),
            metadata=LibvirtConfigGuestMetadata.find_in(element),
            devices=tuple(device for device in parsed if device is not None),
        )

    @property
    def hostdevs(self) -> tuple[LibvirtConfigGuestHostdevPCI, ...]:
        return tuple(d for d in self.devices if isinstance(d, LibvirtConfigGuestHostdevPCI))


@dataclass(frozen=True, slots=True)
class LibvirtConfigCapsGuest:
    """One ``<guest>`` of the capabilities: an OS type on an arch, and its domain types."""

    os_type: str
    arch: str
    domain_types: tuple[str, ...]

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        arch = _required(element, "arch")
        return cls(
            os_type=_text(element, "os_type"),
            arch=_attr(arch, "name"),
            domain_types=tuple(_attr(d, "type") for d in arch.findall("domain")),
        )


def _topology(element: etree._Element | None) -> dict[str, int]:
    if element is None:
        return {}
    keys = ("sockets", "dies", "cores", "threads")
    return {key: int(value) for key, value in element.attrib.items() if key in keys}


@dataclass(frozen=True, slots=True)
class LibvirtConfigCaps:
    """The parts of ``virConnectGetCapabilities`` novaq reads; read-only."""

    host_arch: str
    host_model: str | None
    host_vendor: str | None
    host_topology: dict[str, int]
    host_features: tuple[str, ...]
    numa_cells: int
    guests: tuple[LibvirtConfigCapsGuest, ...]

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        cpu = _required(element, "host/cpu")
        topology = cpu.find("topology")
        cells = element.find("host/topology/cells")
        return cls(
            host_arch=_text(cpu, "arch"),
            host_model=cpu.findtext("model"),
            host_vendor=cpu.findtext("vendor"),
            host_topology=_topology(topology),
            host_features=tuple(_attr(f, "name") for f in cpu.findall("feature")),
            numa_cells=int(cells.get("num", "0")) if cells is not None else 0,
            guests=tuple(LibvirtConfigCapsGuest.from_element(g) for g in element.findall("guest")),
        )

    @classmethod
    def from_xml(cls, xml: str) -> Self:
        return cls.from_element(etree.fromstring(xml.encode()))


@dataclass(frozen=True, slots=True)
class LibvirtConfigNodeDevicePci:
    """A PCI node device (``virsh nodedev-dumpxml``); read-only. Ids without ``0x``."""

    name: str
    address: str
    vendor_id: str
    product_id: str
    numa_node: int | None
    product_name: str | None
    sub_capabilities: tuple[str, ...]

    @classmethod
    def from_element(cls, element: etree._Element) -> Self:
        cap = _required(element, "capability[@type='pci']")
        numa = cap.find("numa")
        product = _required(cap, "product")
        address = LibvirtConfigGuestHostdevPCI(
            domain=int(_text(cap, "domain"), 0),
            bus=int(_text(cap, "bus"), 0),
            slot=int(_text(cap, "slot"), 0),
            function=int(_text(cap, "function"), 0),
        ).address
        return cls(
            name=_text(element, "name"),
            address=address,
            vendor_id=_pci_id(_attr(_required(cap, "vendor"), "id")),
            product_id=_pci_id(_attr(product, "id")),
            numa_node=int(_attr(numa, "node")) if numa is not None else None,
            product_name=product.text,
            sub_capabilities=tuple(_attr(sub, "type") for sub in cap.findall("capability")),
        )

    @classmethod
    def from_xml(cls, xml: str) -> Self:
        return cls.from_element(etree.fromstring(xml.encode()))


def _pci_id(value: str) -> str:
    """``0x10de`` -> ``10de``."""
    return f"{int(value, 16):04x}"
