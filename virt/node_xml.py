"""Node XML for libvirt's test driver: one simulated compute host per file.

Owns the translation of a ``HostProfile`` into the custom node file that
``test:///<file>`` loads (see libvirt ``src/test/test_driver.c``: ``testOpenFromFile``):
CPU topology and memory (``virNodeGetInfo``), a storage pool for local disk,
one node device per PCI device, and optionally guests that come back when a
restarted simulated host opens the file again. Refuses to talk to libvirt and
never formats values into strings: everything is built with lxml.

What the test driver does with this file (libvirt 9):

* ``<cpu>``: ``cpus = nodes * sockets * cores * threads``, capped by ``<active>``.
* ``<memory>``/``<freeMemory>``: KiB.
* ``<pool>``: every pool's capacity is pinned to 100 GiB whatever the XML says
  (``testStoragePoolObjSetDefaults``), so the pool ``default`` also carries one
  volume, ``novaq-local-disk``, whose capacity is the host's local disk; the
  libvirt driver reads that volume when it exists (``Host.get_local_disk_bytes``).
* ``<device>``: node devices as ``virsh nodedev-dumpxml`` prints them.
* ``<domain>``: defined and started; a ``test:runstate`` element (namespace
  ``http://libvirt.org/schemas/domain/test/1.0``) sets another state and
  ``test:hasmanagedsave`` a saved (suspended) guest.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from lxml import etree

from novaq.exceptions import InvalidInput
from virt import power_state
from virt.atomic_write import write_atomically
from virt.host_profile import HostProfile, PciDeviceSpec
from virt.libvirt.host import LOCAL_DISK_POOL, LOCAL_DISK_VOLUME

TEST_NS: Final = "http://libvirt.org/schemas/domain/test/1.0"
POOL_PATH: Final = "/var/lib/novaq/instances"
CPU_MHZ: Final = 2400
CPU_MODEL: Final = "x86_64"

_RUNSTATE: Final[dict[int, int]] = {
    power_state.RUNNING: power_state.VIR_DOMAIN_RUNNING,
    power_state.PAUSED: power_state.VIR_DOMAIN_PAUSED,
    power_state.SHUTDOWN: power_state.VIR_DOMAIN_SHUTOFF,
    power_state.CRASHED: power_state.VIR_DOMAIN_CRASHED,
}


def _leaf(parent: etree._Element, tag: str, text: object, **attrs: str) -> etree._Element:
    element = etree.SubElement(parent, tag, attrs)
    element.text = str(text)
    return element


def _cpu_element(vcpus: int) -> etree._Element:
    """A topology of exactly ``vcpus`` CPUs: two threads per core when the count is even."""
    threads = 2 if vcpus % 2 == 0 else 1
    cpu = etree.Element("cpu")
    for tag, value in (
        ("mhz", CPU_MHZ),
        ("model", CPU_MODEL),
        ("active", vcpus),
        ("nodes", 1),
        ("sockets", 1),
        ("cores", vcpus // threads),
        ("threads", threads),
    ):
        _leaf(cpu, tag, value)
    return cpu


def _pool_element(profile: HostProfile) -> etree._Element:
    pool = etree.Element("pool", type="dir")
    _leaf(pool, "name", LOCAL_DISK_POOL)
    _leaf(pool, "uuid", uuid.uuid5(uuid.NAMESPACE_URL, f"novaq:{profile.name}:pool"))
    _leaf(pool, "capacity", profile.local_gb, unit="GiB")
    _leaf(pool, "allocation", 0, unit="bytes")
    _leaf(pool, "available", profile.local_gb, unit="GiB")
    target = etree.SubElement(pool, "target")
    _leaf(target, "path", POOL_PATH)
    volume = etree.SubElement(pool, "volume", type="file")
    _leaf(volume, "name", LOCAL_DISK_VOLUME)
    _leaf(volume, "capacity", profile.local_gb, unit="GiB")
    _leaf(volume, "allocation", 0, unit="bytes")
    return pool


def nodedev_name(address: str) -> str:
    """libvirt's node device name for a PCI address: ``pci_0000_08_00_0``."""
    return "pci_" + address.replace(":", "_").replace(".", "_")


def _pci_device_element(spec: PciDeviceSpec) -> etree._Element:
    domain, bus, slot_function = spec.address.split(":")
    slot, function = slot_function.split(".")
    device = etree.Element("device")
    _leaf(device, "name", nodedev_name(spec.address))
    capability = etree.SubElement(device, "capability", type="pci")
    for tag, value in (("domain", domain), ("bus", bus), ("slot", slot), ("function", function)):
        _leaf(capability, tag, int(value, 16))
    product = etree.SubElement(capability, "product", id="0x" + spec.product_id)
    product.text = spec.product_name
    etree.SubElement(capability, "vendor", id="0x" + spec.vendor_id)
    if spec.numa_node is not None:
        etree.SubElement(capability, "numa", node=str(spec.numa_node))
    return device


def _domain_element(domain_xml: str) -> etree._Element:
    try:
        element = etree.fromstring(domain_xml.encode())
    except etree.XMLSyntaxError as exc:
        raise InvalidInput(reason=f"domain XML does not parse: {exc}") from exc
    if element.tag != "domain":
        raise InvalidInput(reason=f"expected a <domain> element, got <{element.tag!s}>")
    if "id" in element.attrib:
        del element.attrib["id"]  # the id of a running domain belongs to its old life
    return element


def build_node_xml(profile: HostProfile, domains: Sequence[str] = ()) -> str:
    """The test driver node XML of ``profile``, with ``domains`` (domain XML strings) inside."""
    node = etree.Element("node")
    node.append(_cpu_element(profile.vcpus))
    _leaf(node, "memory", profile.memory_mb * 1024)
    _leaf(node, "freeMemory", profile.memory_mb * 1024)
    node.append(_pool_element(profile))
    for spec in profile.pci_devices:
        node.append(_pci_device_element(spec))
    for domain_xml in domains:
        node.append(_domain_element(domain_xml))
    return etree.tostring(node, pretty_print=True, encoding="unicode")


def domain_for_restart(domain_xml: str, state: int, *, managed_save: bool = False) -> str:
    """``domain_xml`` marked to come back in Nova power ``state`` when the node file opens.

    ``managed_save=True`` brings back a suspended guest (shut off with saved memory).
    """
    if managed_save:
        state = power_state.SHUTDOWN
    if state not in _RUNSTATE:
        raise InvalidInput(reason=f"cannot restore a guest in power state {int(state)!r}")
    original = _domain_element(domain_xml)
    element = etree.Element(original.tag, nsmap={"test": TEST_NS})
    for key, value in original.attrib.items():
        element.set(key, value)
    element.text = original.text
    element.extend(list(original))
    _leaf(element, f"{{{TEST_NS}}}runstate", _RUNSTATE[state])
    if managed_save:
        etree.SubElement(element, f"{{{TEST_NS}}}hasmanagedsave")
    return etree.tostring(element, encoding="unicode")


def write_node_xml(profile: HostProfile, directory: Path, domains: Sequence[str] = ()) -> Path:
    """Write ``<directory>/<profile.name>.xml`` atomically (temp file + rename); return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{profile.name}.xml"
    write_atomically(path, build_node_xml(profile, domains))
    return path


def test_uri(path: Path) -> str:
    """The libvirt URI of a node file: ``test:///abs/path.xml``."""
    return "test://" + str(Path(path).absolute())


test_uri.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
