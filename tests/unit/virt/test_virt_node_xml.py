from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lxml import etree

from novaq.exceptions import InvalidInput
from virt import power_state
from virt.driver import GuestSpec
from virt.host_profile import HostProfile, PciDeviceSpec
from virt.libvirt.driver import LibvirtDriver
from virt.node_xml import (
    build_node_xml,
    domain_for_restart,
    nodedev_name,
    test_uri,
    write_node_xml,
)

MakeDriver = Callable[..., LibvirtDriver]


def _cpus(node: etree._Element) -> int:
    cpu = node.find("cpu")
    assert cpu is not None
    counts = [int(cpu.findtext(tag) or "0") for tag in ("nodes", "sockets", "cores", "threads")]
    product = counts[0] * counts[1] * counts[2] * counts[3]
    return min(product, int(cpu.findtext("active") or "0"))


@pytest.mark.parametrize("vcpus", [1, 7, 16, 96])
def test_cpu_topology_gives_exactly_the_profile_vcpus(vcpus: int) -> None:
    node = etree.fromstring(build_node_xml(HostProfile("h", vcpus=vcpus)).encode())

    assert _cpus(node) == vcpus


def test_memory_is_in_kib(gpu_profile: HostProfile) -> None:
    node = etree.fromstring(build_node_xml(gpu_profile).encode())

    assert node.findtext("memory") == node.findtext("freeMemory") == str(32768 * 1024)


def test_pci_node_devices_follow_libvirt_nodedev_xml(gpu_profile: HostProfile) -> None:
    node = etree.fromstring(build_node_xml(gpu_profile).encode())

    devices = node.findall("device")
    assert [d.findtext("name") for d in devices] == ["pci_0000_08_00_0", "pci_0000_88_00_0"]
    cap = devices[1].find("capability[@type='pci']")
    assert cap is not None
    assert [cap.findtext(t) for t in ("domain", "bus", "slot", "function")] == [
        "0",
        "136",
        "0",
        "0",
    ]
    assert cap.find("product").get("id") == "0x13f1"  # type: ignore[union-attr]
    assert cap.find("vendor").get("id") == "0x10de"  # type: ignore[union-attr]


def test_numa_node_is_written_only_when_known() -> None:
    profile = HostProfile(
        "h", pci_devices=(PciDeviceSpec("0000:3b:00.1", "8086", "1572", numa_node=1),)
    )
    node = etree.fromstring(build_node_xml(profile).encode())

    assert node.find("device/capability/numa").get("node") == "1"  # type: ignore[union-attr]
    assert nodedev_name("0000:3b:00.1") == "pci_0000_3b_00_1"


def test_write_node_xml_is_atomic_and_named_after_the_host(
    tmp_path: Path, gpu_profile: HostProfile
) -> None:
    path = write_node_xml(gpu_profile, tmp_path / "nodes")
    write_node_xml(gpu_profile, tmp_path / "nodes")  # replaces in place

    assert path == tmp_path / "nodes" / "host1.xml"
    assert [p.name for p in path.parent.iterdir()] == ["host1.xml"]
    assert path.read_text() == build_node_xml(gpu_profile)


def test_test_uri_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    assert test_uri(Path("node.xml")) == f"test://{tmp_path}/node.xml"
    assert test_uri(Path("node.xml")).startswith("test:///")


def test_embedded_domains_must_be_domains(gpu_profile: HostProfile) -> None:
    with pytest.raises(InvalidInput, match="expected a <domain>"):
        build_node_xml(gpu_profile, ["<node/>"])
    with pytest.raises(InvalidInput, match="does not parse"):
        build_node_xml(gpu_profile, ["<domain>"])


def test_restarted_host_comes_back_with_its_guests(
    make_driver: MakeDriver, gpu_profile: HostProfile, plain_spec: GuestSpec, gpu_spec: GuestSpec
) -> None:
    before = make_driver(gpu_profile)
    before.spawn(plain_spec)
    before.spawn(gpu_spec)
    domains = tuple(before.get_info(u).xml for u in (plain_spec.uuid, gpu_spec.uuid))

    after = make_driver(gpu_profile, domains=domains)

    assert after.list_instance_uuids() == sorted([plain_spec.uuid, gpu_spec.uuid])
    info = after.get_info(gpu_spec.uuid)
    assert info.power_state == power_state.RUNNING
    assert info.pci_addresses == gpu_spec.pci_addresses
    assert info.name == "gpu"


@pytest.mark.parametrize("state", [power_state.RUNNING, power_state.PAUSED, power_state.SHUTDOWN])
def test_restarted_guests_keep_their_power_state(
    make_driver: MakeDriver, gpu_profile: HostProfile, plain_spec: GuestSpec, state: int
) -> None:
    xml = make_driver(gpu_profile).spawn(plain_spec).xml

    after = make_driver(gpu_profile, domains=(domain_for_restart(xml, state),))

    assert after.get_info(plain_spec.uuid).power_state == state


def test_restarted_suspended_guest_resumes(
    make_driver: MakeDriver, gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    xml = make_driver(gpu_profile).spawn(plain_spec).xml
    restored = domain_for_restart(xml, power_state.SHUTDOWN, managed_save=True)

    after = make_driver(gpu_profile, domains=(restored,))
    after.resume(plain_spec.uuid)

    assert after.get_info(plain_spec.uuid).power_state == power_state.RUNNING


def test_domain_for_restart_refuses_unknown_states(plain_spec: GuestSpec) -> None:
    with pytest.raises(InvalidInput, match="power state 0"):
        domain_for_restart("<domain type='test'/>", power_state.NOSTATE)
