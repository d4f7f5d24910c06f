"""LibvirtDriver on a fresh ``test:///<tmp>/node.xml`` per test."""

from __future__ import annotations

import threading
import uuid as uuid_module
from collections.abc import Callable
from dataclasses import replace

import pytest
from lxml import etree

from novaq.exceptions import DomainNotFound, HypervisorError
from virt import power_state
from virt.driver import GuestSpec
from virt.host_profile import HostProfile, PciDeviceSpec
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.host_facts import pci_device

MakeDriver = Callable[..., LibvirtDriver]


def test_resources_read_back_equal_the_profile(driver: LibvirtDriver) -> None:
    resources = driver.get_available_resource()

    assert (resources.vcpus, resources.memory_mb, resources.local_gb) == (16, 32768, 500)
    assert [(d.address, d.vendor_id, d.product_id, d.dev_type) for d in resources.pci_devices] == [
        ("0000:08:00.0", "10de", "13f1", "type-PCI"),
        ("0000:88:00.0", "10de", "13f1", "type-PCI"),
    ]
    assert resources.hypervisor_type == "TEST"
    assert resources.hypervisor_version > 0
    assert resources.hypervisor_hostname == driver.get_available_nodes()[0]
    assert resources.cpu_info["topology"] == {"cells": 1, "sockets": 1, "cores": 8, "threads": 2}
    assert resources.cpu_info["arch"]


def test_resources_of_an_odd_sized_host(make_driver: MakeDriver) -> None:
    profile = HostProfile(
        "odd",
        vcpus=7,
        memory_mb=3000,
        local_gb=42,
        pci_devices=(PciDeviceSpec("0000:3b:00.1", "8086", "1572", numa_node=0),),
    )
    resources = make_driver(profile).get_available_resource()

    assert (resources.vcpus, resources.memory_mb, resources.local_gb) == (7, 3000, 42)
    assert [(d.address, d.numa_node) for d in resources.pci_devices] == [("0000:3b:00.1", 0)]


def test_pci_device_types_follow_sr_iov_capabilities() -> None:
    xml = """<device><name>pci_0000_3b_00_1</name><capability type='pci'>
      <domain>0</domain><bus>59</bus><slot>0</slot><function>1</function>
      <product id='0x1572'>X710</product><vendor id='0x8086'>Intel</vendor>
      <capability type='virt_functions' maxCount='64'/></capability></device>"""

    assert pci_device(xml).dev_type == "type-PF"
    assert pci_device(xml.replace("virt_functions", "phys_function")).dev_type == "type-VF"


def test_spawn_runs_the_guest_with_one_hostdev_per_address(
    driver: LibvirtDriver, gpu_spec: GuestSpec
) -> None:
    info = driver.spawn(gpu_spec)

    assert info.power_state == power_state.RUNNING
    assert driver.get_info(gpu_spec.uuid).power_state == power_state.RUNNING
    assert (info.vcpus, info.memory_mb) == (4, 8192)
    assert info.pci_addresses == ("0000:08:00.0", "0000:88:00.0")
    domain = etree.fromstring(info.xml.encode())
    addresses = domain.findall("devices/hostdev/source/address")
    assert len(domain.findall("devices/hostdev")) == len(gpu_spec.pci_addresses)
    assert [(a.get("bus"), a.get("slot"), a.get("function")) for a in addresses] == [
        ("0x08", "0x00", "0x0"),
        ("0x88", "0x00", "0x0"),
    ]


def test_spawn_twice_is_idempotent(driver: LibvirtDriver, plain_spec: GuestSpec) -> None:
    first = driver.spawn(plain_spec)
    second = driver.spawn(plain_spec)

    assert first == second
    assert driver.list_instance_uuids() == [plain_spec.uuid]


def test_spawn_starts_an_existing_stopped_guest(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    driver.power_off(plain_spec.uuid)

    assert driver.spawn(plain_spec).power_state == power_state.RUNNING


def test_destroy_removes_the_guest_and_tolerates_a_missing_one(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)

    driver.destroy(plain_spec.uuid)
    driver.destroy(plain_spec.uuid)
    driver.destroy(str(uuid_module.uuid4()))

    assert not driver.instance_exists(plain_spec.uuid)
    assert driver.list_instance_uuids() == []
    with pytest.raises(DomainNotFound) as excinfo:
        driver.get_info(plain_spec.uuid)
    assert excinfo.value.__cause__ is not None  # translated from libvirtError


def test_destroy_removes_a_suspended_guest_and_its_saved_memory(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    driver.suspend(plain_spec.uuid)

    driver.destroy(plain_spec.uuid)

    assert driver.list_instance_uuids() == []


def test_fail_spawn_defines_nothing(
    make_driver: MakeDriver, gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    driver = make_driver(gpu_profile, fail_spawn=True)

    with pytest.raises(HypervisorError, match="simulated host refuses to start guests"):
        driver.spawn(plain_spec)
    assert driver.list_instance_uuids() == []


def test_a_failed_start_leaves_no_definition(driver: LibvirtDriver, plain_spec: GuestSpec) -> None:
    other = replace(plain_spec, uuid=str(uuid_module.uuid4()))
    driver.spawn(plain_spec)

    with pytest.raises(HypervisorError):
        driver.spawn(other)  # same name, other uuid: libvirt refuses

    assert driver.list_instance_uuids() == [plain_spec.uuid]


def test_power_ops_on_a_missing_guest_raise_domain_not_found(driver: LibvirtDriver) -> None:
    missing = str(uuid_module.uuid4())
    for operation in ("power_off", "power_on", "pause", "unpause", "suspend", "resume"):
        with pytest.raises(DomainNotFound, match=missing):
            getattr(driver, operation)(missing)


def test_soft_reboot_keeps_the_guest_running(driver: LibvirtDriver, plain_spec: GuestSpec) -> None:
    driver.spawn(plain_spec)

    driver.reboot(plain_spec, hard=False)

    assert driver.get_info(plain_spec.uuid).power_state == power_state.RUNNING


def test_hard_reboot_of_a_suspended_guest_boots_afresh(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    driver.suspend(plain_spec.uuid)

    driver.reboot(plain_spec, hard=True)

    domain = driver.host.lookup_domain(plain_spec.uuid)
    assert driver.get_info(plain_spec.uuid).power_state == power_state.RUNNING
    assert not domain.hasManagedSaveImage(0)


def test_suspend_is_a_managed_save(driver: LibvirtDriver, plain_spec: GuestSpec) -> None:
    driver.spawn(plain_spec)

    driver.suspend(plain_spec.uuid)

    domain = driver.host.lookup_domain(plain_spec.uuid)
    assert domain.hasManagedSaveImage(0)
    assert driver.get_info(plain_spec.uuid).power_state == power_state.SHUTDOWN
    driver.resume(plain_spec.uuid)
    assert not domain.hasManagedSaveImage(0)


def test_libvirt_errors_do_not_reach_stderr(
    driver: LibvirtDriver, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(DomainNotFound):
        driver.get_info(str(uuid_module.uuid4()))

    assert capfd.readouterr().err == ""


def test_unreachable_uri_raises_hypervisor_error() -> None:
    driver = LibvirtDriver("test:///nonexistent/novaq/node.xml")

    with pytest.raises(HypervisorError, match="connecting to test:///nonexistent"):
        driver.get_available_resource()


def test_threads_share_one_connection(driver: LibvirtDriver, plain_spec: GuestSpec) -> None:
    specs = [replace(plain_spec, uuid=str(uuid_module.uuid4()), name=f"g{i}") for i in range(8)]
    threads = [threading.Thread(target=driver.spawn, args=(spec,)) for spec in specs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert driver.list_instance_uuids() == sorted(spec.uuid for spec in specs)


def test_close_forgets_the_simulated_guests(driver: LibvirtDriver, plain_spec: GuestSpec) -> None:
    driver.spawn(plain_spec)

    driver.close()

    assert driver.list_instance_uuids() == []  # reopened from the node file
