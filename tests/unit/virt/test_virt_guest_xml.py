"""Guest XML: config objects, designer policy, golden files, and every golden XML
defined, started, destroyed and undefined on a fresh test driver."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from lxml import etree

from virt import power_state
from virt.driver import GuestSpec, ImageSpec
from virt.libvirt.config import (
    LibvirtConfigCaps,
    LibvirtConfigGuest,
    LibvirtConfigGuestHostdevPCI,
)
from virt.libvirt.designer import GuestPlatform, choose_platform, design_guest
from virt.libvirt.driver import LibvirtDriver

INSTANCES = Path("/var/lib/novaq/instances")
TEST_PLATFORM = GuestPlatform(virt_type="test", arch="i686")


def _caps(host_arch: str, guests: list[tuple[str, str, list[str]]]) -> LibvirtConfigCaps:
    root = etree.Element("capabilities")
    cpu = etree.SubElement(etree.SubElement(root, "host"), "cpu")
    etree.SubElement(cpu, "arch").text = host_arch
    for os_type, arch, domain_types in guests:
        guest = etree.SubElement(root, "guest")
        etree.SubElement(guest, "os_type").text = os_type
        arch_element = etree.SubElement(guest, "arch", name=arch)
        for domain_type in domain_types:
            etree.SubElement(arch_element, "domain", type=domain_type)
    return LibvirtConfigCaps.from_element(root)


@pytest.mark.parametrize(
    ("guests", "expected"),
    [
        ([("hvm", "x86_64", ["qemu", "kvm"])], GuestPlatform("kvm", "x86_64")),
        ([("hvm", "x86_64", ["qemu"])], GuestPlatform("qemu", "x86_64")),
        ([("hvm", "i686", ["kvm"]), ("hvm", "x86_64", ["qemu"])], GuestPlatform("qemu", "x86_64")),
        (
            [("xen", "x86_64", ["xen"]), ("hvm", "x86_64", ["test"])],
            GuestPlatform("test", "x86_64"),
        ),
    ],
)
def test_choose_platform_prefers_kvm_then_qemu_on_the_host_arch(
    guests: list[tuple[str, str, list[str]]], expected: GuestPlatform
) -> None:
    assert choose_platform(_caps("x86_64", guests)) == expected


def test_choose_platform_on_the_test_driver(driver: LibvirtDriver) -> None:
    caps = LibvirtConfigCaps.from_xml(driver.host.get_capabilities_xml())

    assert choose_platform(caps) == TEST_PLATFORM


def _define_start_destroy_undefine(driver: LibvirtDriver, xml: str) -> None:
    conn = driver.host.get_connection()
    domain = conn.defineXML(xml)
    domain.create()
    assert domain.state()[0] == power_state.VIR_DOMAIN_RUNNING
    domain.destroy()
    domain.undefine()
    assert conn.listAllDomains(0) == []


@pytest.mark.parametrize(
    ("golden_name", "spec_fixture"),
    [("guest_plain.xml", "plain_spec"), ("guest_two_gpus.xml", "gpu_spec")],
)
def test_guest_xml_matches_golden_and_runs_on_the_test_driver(
    golden_name: str,
    spec_fixture: str,
    request: pytest.FixtureRequest,
    golden: Callable[[str, str], None],
    driver: LibvirtDriver,
) -> None:
    spec: GuestSpec = request.getfixturevalue(spec_fixture)
    xml = design_guest(spec, TEST_PLATFORM, INSTANCES).to_xml()

    golden(golden_name, xml)
    assert (
        driver.guest_xml(spec) == design_guest(spec, TEST_PLATFORM, driver.instances_path).to_xml()
    )
    _define_start_destroy_undefine(driver, xml)


def test_hostdevs_follow_the_requested_addresses(gpu_spec: GuestSpec) -> None:
    domain = design_guest(gpu_spec, TEST_PLATFORM, INSTANCES).to_element()

    addresses = [a.attrib for a in domain.iterfind("devices/hostdev/source/address")]
    assert [dict(a) for a in addresses] == [
        {"domain": "0x0000", "bus": "0x08", "slot": "0x00", "function": "0x0"},
        {"domain": "0x0000", "bus": "0x88", "slot": "0x00", "function": "0x0"},
    ]
    assert [h.get("managed") for h in domain.iterfind("devices/hostdev")] == ["yes", "yes"]


def test_disks_are_named_as_nova_names_them(gpu_spec: GuestSpec, plain_spec: GuestSpec) -> None:
    gpu = design_guest(gpu_spec, TEST_PLATFORM, INSTANCES).to_element()
    plain = design_guest(plain_spec, TEST_PLATFORM, INSTANCES).to_element()

    sources = [s.get("file") for s in gpu.iterfind("devices/disk/source")]
    assert sources == [
        str(INSTANCES / gpu_spec.uuid / n) for n in ("disk", "disk.eph0", "disk.swap")
    ]
    assert [t.get("dev") for t in gpu.iterfind("devices/disk/target")] == ["vda", "vdb", "vdc"]
    assert len(plain.findall("devices/disk")) == 1


def test_config_round_trips(gpu_spec: GuestSpec) -> None:
    config = design_guest(gpu_spec, TEST_PLATFORM, INSTANCES)

    assert LibvirtConfigGuest.from_xml(config.to_xml()) == config


@pytest.mark.parametrize("address", ["0000:08:00.0", "0001:ff:1f.7", "0000:3b:00.1"])
def test_hostdev_address_round_trips(address: str) -> None:
    hostdev = LibvirtConfigGuestHostdevPCI.from_address(address)

    assert hostdev.address == address
    assert LibvirtConfigGuestHostdevPCI.from_xml(hostdev.to_xml()) == hostdev


def test_special_characters_are_escaped_and_survive_libvirt(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    name = "a<b&\"c'"
    image = "<img> & 'x'"
    spec = replace(plain_spec, name=name, image=ImageSpec(id=image, name=image, location=""))
    xml = driver.guest_xml(spec)

    assert "a&lt;b&amp;" in xml
    info = driver.spawn(spec)
    parsed = LibvirtConfigGuest.from_xml(info.xml)
    assert info.name == parsed.name == name
    assert parsed.metadata is not None and parsed.metadata.image == image


def test_from_element_reads_what_libvirt_gives_back(
    driver: LibvirtDriver, gpu_spec: GuestSpec
) -> None:
    info = driver.spawn(gpu_spec)

    parsed = LibvirtConfigGuest.from_xml(info.xml)
    assert parsed == design_guest(gpu_spec, TEST_PLATFORM, driver.instances_path)
