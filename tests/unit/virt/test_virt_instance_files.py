"""Instance files and the base image cache a driver keeps under ``instances_path``: written
at spawn, kept by destroy, removed by ``delete_instance_files``; the image cache manager's
rules on both drivers. Real files in ``tmp_path`` (tiny real images, qcow2 disks made by
qemu-img), a fresh ``test:///`` node per test."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from novaq.exceptions import HypervisorError
from tests.disk_images import make_raw_image
from tests.undeletable import undeletable
from virt.driver import ComputeDriver, GuestSpec, HostResources, ImageSpec
from virt.fake import FakeDriver
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.imagecache import cache_file_name
from virt.node_xml import test_uri, write_node_xml

HOUR_S = 3600


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """The image store the test images live in."""
    return tmp_path / "store"


def _image(store: Path, image: str) -> ImageSpec:
    return make_raw_image(store, image)


def _spec(uuid: str, store: Path, image: str = "cirros") -> GuestSpec:
    return GuestSpec(
        uuid=uuid,
        name=f"i-{uuid[-6:]}",
        vcpus=1,
        memory_mb=256,
        root_gb=1,
        image=_image(store, image),
    )


@pytest.fixture
def plain_spec(store: Path) -> GuestSpec:
    return _spec("6c4ab0a2-8ad5-4bd5-9d9c-1b0b8b0b3f11", store)


@pytest.fixture
def gpu_spec(store: Path) -> GuestSpec:
    return GuestSpec(
        uuid="0e5c2c52-3b4f-4b8e-a4a7-3c4b8f0d9e22",
        name="gpu",
        vcpus=4,
        memory_mb=8192,
        root_gb=40,
        ephemeral_gb=10,
        swap_mb=1024,
        image=_image(store, "ubuntu-22.04"),
        pci_addresses=("0000:08:00.0", "0000:88:00.0"),
    )


def _base_file(driver: LibvirtDriver, image: str) -> Path:
    return driver.instances_path / "_base" / cache_file_name(image)


def _age(path: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


# -- files written at spawn -----------------------------------------------------------------


def test_spawn_writes_the_instance_directory_with_novas_disk_info(
    driver: LibvirtDriver, gpu_spec: GuestSpec
) -> None:
    driver.spawn(gpu_spec)

    directory = driver.instances_path / gpu_spec.uuid
    disk_info = json.loads((directory / "disk.info").read_text())
    assert disk_info == {
        str(directory / "disk"): "qcow2",
        str(directory / "disk.eph0"): "qcow2",
        str(directory / "disk.swap"): "qcow2",
    }
    names = sorted(p.name for p in directory.iterdir())
    assert names == ["disk", "disk.eph0", "disk.info", "disk.swap"]
    assert driver.instance_files_exist(gpu_spec.uuid)


def test_spawn_caches_the_base_image_named_by_the_sha1_of_the_image(
    driver: LibvirtDriver, gpu_spec: GuestSpec
) -> None:
    driver.spawn(gpu_spec)

    base = driver.instances_path / "_base" / hashlib.sha1(b"ubuntu-22.04").hexdigest()
    assert gpu_spec.image is not None
    assert base.read_bytes() == Path(gpu_spec.image.location).read_bytes()
    assert time.time() - base.stat().st_mtime < 60


def test_a_second_guest_of_a_cached_image_marks_the_base_file_used(
    driver: LibvirtDriver, plain_spec: GuestSpec, store: Path
) -> None:
    driver.spawn(plain_spec)
    base = _base_file(driver, "cirros")
    _age(base, 2 * HOUR_S)

    driver.spawn(_spec("11111111-2222-3333-4444-555555555555", store))

    assert time.time() - base.stat().st_mtime < 60


def test_the_image_cache_directory_follows_the_subdirectory_option(
    tmp_path: Path, gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    uri = test_uri(write_node_xml(gpu_profile, tmp_path / "node"))
    driver = LibvirtDriver(uri, instances_path=tmp_path / "inst", image_cache_subdirectory="cache")
    try:
        driver.spawn(plain_spec)
    finally:
        driver.close()

    assert (tmp_path / "inst" / "cache" / cache_file_name("cirros")).is_file()
    assert not (tmp_path / "inst" / "_base").exists()


def test_a_host_that_refuses_to_spawn_writes_no_files(
    make_driver: Callable[..., LibvirtDriver], gpu_profile: HostProfile, plain_spec: GuestSpec
) -> None:
    driver = make_driver(gpu_profile, fail_spawn=True)

    with pytest.raises(HypervisorError, match="refuses"):
        driver.spawn(plain_spec)

    assert not driver.instance_files_exist(plain_spec.uuid)
    assert not (driver.instances_path / "_base").exists()


def test_a_guest_libvirt_refuses_to_define_leaves_no_instance_directory(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    same_name = GuestSpec(
        uuid="22222222-3333-4444-5555-666666666666",
        name=plain_spec.name,
        vcpus=1,
        memory_mb=256,
        root_gb=1,
    )

    with pytest.raises(HypervisorError, match="already exists"):
        driver.spawn(same_name)

    assert not driver.instance_files_exist(same_name.uuid)
    assert driver.instance_files_exist(plain_spec.uuid)


# -- destroy keeps them, delete_instance_files removes them -------------------------------------


def test_destroy_keeps_the_files_and_delete_instance_files_removes_them(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)

    driver.destroy(plain_spec.uuid)
    assert driver.instance_files_exist(plain_spec.uuid)

    assert driver.delete_instance_files(plain_spec.uuid) is True
    assert not driver.instance_files_exist(plain_spec.uuid)
    assert not (driver.instances_path / f"{plain_spec.uuid}_del").exists()
    assert _base_file(driver, "cirros").is_file()  # the cache is not the instance's
    assert driver.delete_instance_files(plain_spec.uuid) is True  # nothing left: done


def test_files_that_cannot_be_removed_are_reported_and_go_on_a_later_attempt(
    driver: LibvirtDriver, plain_spec: GuestSpec
) -> None:
    driver.spawn(plain_spec)
    driver.destroy(plain_spec.uuid)

    with undeletable(driver.instances_path / plain_spec.uuid):
        assert driver.delete_instance_files(plain_spec.uuid) is False
        assert driver.instance_files_exist(plain_spec.uuid)

    assert driver.delete_instance_files(plain_spec.uuid) is True
    assert sorted(p.name for p in driver.instances_path.iterdir()) == ["_base", "locks"]


# -- the image cache manager, same rules on both drivers -------------------------------------


@pytest.fixture(params=["fake", "libvirt"])
def any_driver(
    request: pytest.FixtureRequest,
    make_driver: Callable[..., LibvirtDriver],
    gpu_profile: HostProfile,
    fake_resources: HostResources,
) -> ComputeDriver:
    if request.param == "fake":
        return FakeDriver(fake_resources)
    return make_driver(gpu_profile)


def _age_image(driver: ComputeDriver, image: str, seconds: float) -> None:
    if isinstance(driver, FakeDriver):
        driver.cached_images[image] -= seconds
    else:
        assert isinstance(driver, LibvirtDriver)
        _age(_base_file(driver, image), seconds)


def _cache_with(driver: ComputeDriver, store: Path, *images: str) -> None:
    """Base files of ``images`` cached by guests since deleted (files and all): whether
    they are in use is then only what the manager is told."""
    for index, image in enumerate(images):
        uuid = f"00000000-0000-4000-8000-{index:012d}"
        driver.spawn(_spec(uuid, store, image=image))
        driver.destroy(uuid)
        assert driver.delete_instance_files(uuid)


def test_used_images_are_kept_and_unused_old_ones_removed_young_ones_kept(
    any_driver: ComputeDriver, store: Path
) -> None:
    _cache_with(any_driver, store, "used", "old", "young")
    _age_image(any_driver, "used", 2 * HOUR_S)
    _age_image(any_driver, "old", 2 * HOUR_S)

    report = any_driver.manage_image_cache(
        {"used", "never-fetched"},
        remove_unused=True,
        min_age_s=HOUR_S,
        known_images={"used", "old", "young"},
    )

    assert report.in_use == ("used",)
    assert report.missing == ("never-fetched",)
    assert report.removed == ("old",)
    assert report.kept_unused == ("young",)
    # The used image was marked used now: unused from now on, it is young again.
    again = any_driver.manage_image_cache(
        set(), remove_unused=True, min_age_s=HOUR_S, known_images={"used", "young"}
    )
    assert (again.removed, again.kept_unused) == ((), ("used", "young"))


def test_nothing_is_removed_when_removal_of_unused_base_images_is_off(
    any_driver: ComputeDriver, store: Path
) -> None:
    _cache_with(any_driver, store, "old")
    _age_image(any_driver, "old", 2 * HOUR_S)

    report = any_driver.manage_image_cache(
        set(), remove_unused=False, min_age_s=0, known_images={"old"}
    )

    assert (report.removed, report.kept_unused) == ((), ("old",))


def test_the_libvirt_cache_manager_removes_the_file_and_leaves_strangers_alone(
    driver: LibvirtDriver, store: Path
) -> None:
    _cache_with(driver, store, "old")
    _age(_base_file(driver, "old"), 2 * HOUR_S)
    stranger = driver.instances_path / "_base" / "not-a-base-image"
    stranger.write_text("x")
    _age(stranger, 2 * HOUR_S)

    report = driver.manage_image_cache(set(), remove_unused=True, min_age_s=HOUR_S)

    assert report.removed == (hashlib.sha1(b"old").hexdigest(),)  # an unknown image: by file
    assert not _base_file(driver, "old").exists()
    assert stranger.exists()


def test_a_base_file_a_disk_here_still_uses_is_kept_whatever_the_database_says(
    driver: LibvirtDriver, store: Path
) -> None:
    spec = _spec("11111111-2222-3333-4444-555555555555", store, image="kept")
    driver.spawn(spec)
    driver.destroy(spec.uuid)  # e.g. a move's originals, kept on disk
    _age(_base_file(driver, "kept"), 2 * HOUR_S)

    report = driver.manage_image_cache(
        set(), remove_unused=True, min_age_s=HOUR_S, known_images={"kept"}
    )

    assert (report.removed, report.kept_unused) == ((), ())
    assert _base_file(driver, "kept").is_file()
