"""libvirt XML the driver reads but never writes: host capabilities and PCI node devices.

Read-only mirrors of ``virConnectGetCapabilities`` and ``virsh nodedev-dumpxml`` with
``from_element()``/``from_xml()``; no policy (the designer chooses from them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from lxml import etree

from virt.libvirt.config import LibvirtConfigGuestHostdevPCI
from virt.libvirt.config_base import _attr, _required, _text


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
