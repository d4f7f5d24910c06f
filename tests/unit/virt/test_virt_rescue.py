"""Rescue and unrescue on a ``test:///`` host and a simulated one: the guest's domain
saved, a rescue domain (rescue disk first, root disk second) defined and running, the
saved domain restored; both steps harmless when run again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from novaq.exceptions import HypervisorError
from tests.disk_images import make_raw_image, qemu_img_info
from virt import power_state
from virt.driver import GuestSpec, ImageSpec
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.imagecache import cache_file_name
from virt.simulated import SimulatedHostDriver

UUID = "6c4ab0a2-8ad5-4bd5-9d9c-1b0b8b0b3f11"


def _spec(image: ImageSpec) -> GuestSpec:
    return GuestSpec(
        uuid=UUID, name="rescued", vcpus=1, memory_mb=64, root_gb=1, swap_mb=16, image=image
    )


def _devices(driver: LibvirtDriver) -> list[tuple[str, str]]:
    return [
        (d["target_dev"], Path(d["source_path"]).name) for d in driver.guest_devices(UUID)["disks"]
    ]


def test_rescue_boots_the_rescue_disk_with_the_root_disk_second_and_unrescue_restores(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_raw_image(tmp_path / "store")
    spec = _spec(image)
    driver.spawn(spec)
    own_xml = driver.get_info(UUID).xml
    directory = driver.instances_path / UUID

    info = driver.rescue(spec, image)

    assert info.power_state == power_state.RUNNING
    assert _devices(driver) == [("vda", "disk.rescue"), ("vdb", "disk")]
    assert (directory / "unrescue.xml").read_text() == own_xml
    overlay, base = qemu_img_info(directory / "disk.rescue", chain=True)
    assert overlay["format"] == "qcow2"
    assert Path(base["filename"]).name == cache_file_name(image.id)

    info = driver.unrescue(UUID)

    assert info.power_state == power_state.RUNNING
    assert _devices(driver) == [("vda", "disk"), ("vdb", "disk.swap")]
    assert not (directory / "disk.rescue").exists()
    assert not (directory / "unrescue.xml").exists()


def test_rescue_and_unrescue_run_again_change_nothing(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_raw_image(tmp_path / "store")
    spec = _spec(image)
    driver.spawn(spec)
    own_xml = driver.get_info(UUID).xml
    driver.rescue(spec, image)
    rescue_xml = driver.get_info(UUID).xml

    driver.rescue(spec, image)  # a redelivered rescue

    assert driver.get_info(UUID).xml == rescue_xml
    assert (driver.instances_path / UUID / "unrescue.xml").read_text() == own_xml
    driver.unrescue(UUID)
    driver.unrescue(UUID)  # a redelivered unrescue
    assert _devices(driver) == [("vda", "disk"), ("vdb", "disk.swap")]
    assert driver.get_info(UUID).power_state == power_state.RUNNING


def test_a_stopped_guest_is_rescued_running(driver: LibvirtDriver, tmp_path: Path) -> None:
    image = make_raw_image(tmp_path / "store")
    driver.spawn(_spec(image))
    driver.power_off(UUID)
    assert driver.rescue(_spec(image), image).power_state == power_state.RUNNING


def test_the_rescue_images_properties_choose_the_rescue_device_and_bus(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_raw_image(tmp_path / "store")
    rescue_image = make_raw_image(
        tmp_path / "store", "rescue-cd", hw_rescue_device="cdrom", hw_rescue_bus="sata"
    )
    driver.spawn(_spec(image))
    driver.rescue(_spec(image), rescue_image)
    xml = driver.get_info(UUID).xml
    assert "device='cdrom'" in xml or 'device="cdrom"' in xml
    assert _devices(driver) == [("sda", "disk.rescue"), ("vda", "disk")]


def test_a_rescued_simulated_guest_survives_a_worker_restart(tmp_path: Path) -> None:
    image = make_raw_image(tmp_path / "store")
    state = tmp_path / "hosts" / "host1"
    host = SimulatedHostDriver(HostProfile("host1"), state, instances_path=tmp_path / "inst")
    host.init_host("host1")
    host.spawn(_spec(image))
    host.rescue(_spec(image), image)
    host.close()

    record = json.loads((state / "domains" / f"{UUID}.json").read_text())
    assert "disk.rescue" in record["xml"]
    again = SimulatedHostDriver(HostProfile("host1"), state, instances_path=tmp_path / "inst")
    try:
        again.init_host("host1")
        assert again.get_info(UUID).power_state == power_state.RUNNING
        again.unrescue(UUID)
        disks = [Path(d["source_path"]).name for d in again.guest_devices(UUID)["disks"]]
        assert disks == ["disk", "disk.swap"]
    finally:
        again.close()


@pytest.mark.parametrize(("device", "bus"), [("floppy", ""), ("cdrom", "virtio")])
def test_an_unusable_rescue_device_is_refused_and_the_guest_kept(
    driver: LibvirtDriver, tmp_path: Path, device: str, bus: str
) -> None:
    image = make_raw_image(tmp_path / "store")
    props = {"hw_rescue_device": device, **({"hw_rescue_bus": bus} if bus else {})}
    bad = make_raw_image(tmp_path / "store", "bad-rescue", **props)
    driver.spawn(_spec(image))
    with pytest.raises(HypervisorError, match="unsupported hw_rescue"):
        driver.rescue(_spec(image), bad)
    assert not (driver.instances_path / UUID / "unrescue.xml").exists()
    assert _devices(driver) == [("vda", "disk"), ("vdb", "disk.swap")]
    assert driver.get_info(UUID).power_state == power_state.RUNNING
