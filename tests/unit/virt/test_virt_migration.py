"""The driver side of a cold move between two ``test:///`` hosts' instance directories,
with an image the store still serves: the destination fetches its own base file and the
copied overlay is rebased onto it; confirm and revert on the source; shrink refused on
both drivers with nothing touched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from novaq.exceptions import ResizeError
from tests.disk_images import make_raw_image, qemu_img_info
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec, HostResources
from virt.fake import FakeDriver
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.imagecache import cache_file_name
from virt.node_xml import test_uri, write_node_xml

GIB = 1024**3
UUID = "6c4ab0a2-8ad5-4bd5-9d9c-1b0b8b0b3f11"


@pytest.fixture
def pair(tmp_path: Path) -> object:
    drivers = []
    for name in ("a", "b"):
        uri = test_uri(write_node_xml(HostProfile(name), tmp_path / f"node-{name}"))
        driver = LibvirtDriver(uri, instances_path=tmp_path / name)
        driver.init_host(name)
        drivers.append(driver)
    yield drivers
    for driver in drivers:
        driver.close()


def _spec(tmp_path: Path, root_gb: int = 1) -> GuestSpec:
    image = make_raw_image(tmp_path / "store", "cirros")
    return GuestSpec(uuid=UUID, name="moved", vcpus=1, memory_mb=64, root_gb=root_gb, image=image)


def test_the_destination_fetches_its_own_base_and_the_copy_is_rebased_onto_it(
    pair: list[LibvirtDriver], tmp_path: Path
) -> None:
    a, b = pair
    old = _spec(tmp_path)
    new = dataclasses.replace(old, vcpus=2, root_gb=3)
    a.spawn(old)

    a.migrate_disk_and_power_off(old, new, str(b.instances_path))
    info = b.finish_migration(new, power_on=True)

    assert (info.power_state, info.vcpus) == (power_state.RUNNING, 2)
    overlay, base = qemu_img_info(b.instances_path / UUID / "disk", chain=True)
    assert overlay["virtual-size"] == 3 * GIB
    assert base["filename"] == str(b.instances_path / "_base" / cache_file_name("cirros"))
    assert not a.instance_exists(UUID)
    a.confirm_migration(UUID)
    assert not a.instance_files_exist(UUID)


def test_revert_on_the_source_restores_the_originals_and_the_guest(
    pair: list[LibvirtDriver], tmp_path: Path
) -> None:
    a, b = pair
    old = _spec(tmp_path)
    a.spawn(old)
    a.migrate_disk_and_power_off(old, dataclasses.replace(old, root_gb=2), str(b.instances_path))

    info = a.finish_revert_migration(old, power_on=False)
    again = a.finish_revert_migration(old, power_on=True)  # redelivered, now to start it

    assert info.power_state == power_state.SHUTDOWN
    assert again.power_state == power_state.RUNNING
    assert qemu_img_info(a.instances_path / UUID / "disk")["virtual-size"] == GIB
    assert not (a.instances_path / f"{UUID}_resize").exists()


@pytest.fixture(params=["fake", "libvirt"])
def any_driver(
    request: pytest.FixtureRequest, pair: list[LibvirtDriver], fake_resources: HostResources
) -> ComputeDriver:
    return FakeDriver(fake_resources) if request.param == "fake" else pair[0]


def test_a_shrink_is_refused_and_the_guest_and_its_files_stay(
    any_driver: ComputeDriver, tmp_path: Path
) -> None:
    old = _spec(tmp_path, root_gb=2)
    any_driver.spawn(old)
    shrink: Callable[[], None] = lambda: any_driver.migrate_disk_and_power_off(  # noqa: E731
        old, dataclasses.replace(old, root_gb=1), str(tmp_path / "elsewhere")
    )
    with pytest.raises(ResizeError, match="Unable to resize disk down."):
        shrink()
    assert any_driver.get_info(UUID).power_state == power_state.RUNNING
    assert any_driver.instance_files_exist(UUID)
    assert not (tmp_path / "elsewhere").exists()
