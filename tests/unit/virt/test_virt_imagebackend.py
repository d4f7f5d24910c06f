"""The image backend on a ``test:///`` host with real files: the base fetched (checksum,
format, force_raw_images, once under concurrency), the root disk a qcow2 overlay sized
to the flavor (or a full copy without use_cow_images), ephemeral and swap disks over
their formatted bases, and every failure leaving nothing behind. Tiny sparse images."""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.disk_images import MIB, make_qcow2_image, make_raw_image, qemu_img_info
from virt.driver import GuestSpec, ImageSpec
from virt.host_profile import HostProfile
from virt.libvirt import qemu_img
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.image_fetch import ImageChecksumError, ImageFetchError
from virt.libvirt.imagebackend import DiskOptions, DiskTooSmall, ephemeral_base_name
from virt.libvirt.imagecache import cache_file_name
from virt.libvirt.qemu_img import DiskCommandError
from virt.node_xml import test_uri, write_node_xml

GIB = 1024**3
UUIDS = [f"00000000-0000-4000-8000-{n:012d}" for n in range(8)]


@pytest.fixture
def make(tmp_path: Path) -> Iterator[object]:
    drivers: list[LibvirtDriver] = []

    def build(options: DiskOptions | None = None) -> LibvirtDriver:
        uri = test_uri(write_node_xml(HostProfile("host1"), tmp_path / f"node{len(drivers)}"))
        driver = LibvirtDriver(uri, instances_path=tmp_path / "instances", disk_options=options)
        driver.init_host("host1")
        drivers.append(driver)
        return driver

    yield build
    for driver in drivers:
        driver.close()


@pytest.fixture
def driver(make: object) -> LibvirtDriver:
    assert callable(make)
    result = make()
    assert isinstance(result, LibvirtDriver)
    return result


def _spec(image: ImageSpec | None, n: int = 0, **sizes: int) -> GuestSpec:
    values = {"root_gb": 1, **sizes}
    return GuestSpec(uuid=UUIDS[n], name=f"i-{n}", vcpus=1, memory_mb=64, image=image, **values)


def _base(driver: LibvirtDriver, image: ImageSpec) -> Path:
    return driver.instances_path / "_base" / cache_file_name(image.id)


def _leftovers(driver: LibvirtDriver) -> list[str]:
    """Everything under instances_path but the lock files."""
    return sorted(
        str(p.relative_to(driver.instances_path))
        for p in driver.instances_path.rglob("*")
        if "locks" not in p.parts
    )


# -- the root disk ------------------------------------------------------------------------


def test_the_root_disk_is_a_qcow2_overlay_of_the_raw_base_with_the_flavors_size(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_raw_image(tmp_path / "store")
    driver.spawn(_spec(image, root_gb=3))

    disk = driver.instances_path / UUIDS[0] / "disk"
    overlay, base = qemu_img_info(disk, chain=True)
    assert (overlay["format"], overlay["virtual-size"]) == ("qcow2", 3 * GIB)
    assert overlay["full-backing-filename"] == str(_base(driver, image))
    assert overlay["backing-filename-format"] == "raw"
    assert (base["format"], base["virtual-size"]) == ("raw", MIB)
    assert _base(driver, image).read_bytes() == Path(image.location).read_bytes()


def test_a_flavor_with_no_root_size_gets_the_images_virtual_size(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_raw_image(tmp_path / "store", size=4 * MIB)
    driver.spawn(_spec(image, root_gb=0))
    assert qemu_img_info(driver.instances_path / UUIDS[0] / "disk")["virtual-size"] == 4 * MIB


def test_without_cow_images_the_root_disk_is_a_standalone_copy_grown_to_size(
    make: object, tmp_path: Path
) -> None:
    assert callable(make)
    driver = make(DiskOptions(use_cow_images=False))
    driver.spawn(_spec(make_raw_image(tmp_path / "store"), root_gb=2))

    [layer] = qemu_img_info(driver.instances_path / UUIDS[0] / "disk", chain=True)
    assert (layer["format"], layer["virtual-size"]) == ("qcow2", 2 * GIB)
    assert "backing-filename" not in layer


@pytest.mark.parametrize(("force_raw", "base_format"), [(True, "raw"), (False, "qcow2")])
def test_a_qcow2_image_is_cached_raw_only_with_force_raw_images(
    make: object, tmp_path: Path, force_raw: bool, base_format: str
) -> None:
    assert callable(make)
    driver = make(DiskOptions(force_raw_images=force_raw))
    image = make_qcow2_image(tmp_path / "store")
    driver.spawn(_spec(image))

    overlay, base = qemu_img_info(driver.instances_path / UUIDS[0] / "disk", chain=True)
    assert base["format"] == base_format == overlay["backing-filename-format"]
    assert base["virtual-size"] == 2 * MIB


def test_an_image_with_no_location_gives_a_blank_root_disk(driver: LibvirtDriver) -> None:
    driver.spawn(_spec(ImageSpec(id="stand-in", name="stand-in", location=""), root_gb=2))
    [layer] = qemu_img_info(driver.instances_path / UUIDS[0] / "disk", chain=True)
    assert (layer["format"], layer["virtual-size"]) == ("qcow2", 2 * GIB)
    assert not (driver.instances_path / "_base").exists()


# -- ephemeral and swap ---------------------------------------------------------------------


def test_ephemeral_and_swap_disks_are_overlays_of_formatted_cached_bases(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    driver.spawn(_spec(make_raw_image(tmp_path / "store"), ephemeral_gb=1, swap_mb=64))

    directory = driver.instances_path / UUIDS[0]
    eph, eph_base = qemu_img_info(directory / "disk.eph0", chain=True)
    assert (eph["format"], eph["virtual-size"]) == ("qcow2", GIB)
    assert Path(eph_base["filename"]).name == ephemeral_base_name(1, "vfat")
    with open(eph_base["filename"], "rb") as handle:
        assert handle.read(512)[82:87] == b"FAT32"  # Nova's default file system
    swap, swap_base = qemu_img_info(directory / "disk.swap", chain=True)
    assert (swap["format"], swap["virtual-size"]) == ("qcow2", 64 * MIB)
    assert Path(swap_base["filename"]).name == "swap_64"
    with open(swap_base["filename"], "rb") as handle:
        assert handle.read(4096)[-10:] == b"SWAPSPACE2"


def test_an_image_for_linux_gets_an_ext4_ephemeral_disk(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_raw_image(tmp_path / "store", os_type="linux")
    driver.spawn(_spec(image, ephemeral_gb=1))
    assert (driver.instances_path / "_base" / ephemeral_base_name(1, "ext4")).is_file()


# -- failures leave nothing behind ------------------------------------------------------------


def test_an_image_that_fails_its_checksum_is_refused_and_nothing_is_left(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_raw_image(tmp_path / "store")
    Path(image.location).write_bytes(b"tampered")

    with pytest.raises(ImageChecksumError, match="failed its checksum"):
        driver.spawn(_spec(image))

    assert _leftovers(driver) == ["_base"]  # no base, no temporary file, no instance dir
    assert not driver.instance_exists(UUIDS[0])


def test_data_that_is_not_in_the_declared_format_is_refused(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    real = make_qcow2_image(tmp_path / "store")
    lying = ImageSpec(id="lying", name="lying", location=real.location, disk_format="raw")
    with pytest.raises(ImageFetchError, match="declared raw but its data is qcow2"):
        driver.spawn(_spec(lying))
    assert _leftovers(driver) == ["_base"]


def test_an_image_larger_than_the_flavors_disk_is_refused(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    image = make_qcow2_image(tmp_path / "store", size=2 * GIB)
    with pytest.raises(DiskTooSmall, match="Flavor's disk is too small"):
        driver.spawn(_spec(image, root_gb=1))
    assert not (driver.instances_path / UUIDS[0]).exists()
    assert _base(driver, image).is_file()  # the cache keeps what it fetched


def test_a_missing_qemu_img_is_a_clear_error_and_keeps_the_cached_base(
    driver: LibvirtDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = make_raw_image(tmp_path / "store")
    driver.spawn(_spec(image, n=0))
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))

    with pytest.raises(DiskCommandError, match="qemu-img is not installed") as raised:
        driver.spawn(_spec(image, n=1, root_gb=2))

    # The base's info was asked at the first spawn (``virt.libvirt.base_info``): the
    # first tool the second one runs is the create of an overlay of a new size (one of
    # the first's size is a copy of it: ``virt.libvirt.overlays``).
    assert "qemu-img create -q -f qcow2" in str(raised.value)
    assert not (driver.instances_path / UUIDS[1]).exists()
    assert _base(driver, image).is_file()


# -- idempotence and concurrency ---------------------------------------------------------------


def test_a_redelivered_spawn_keeps_the_disks_it_finds(
    driver: LibvirtDriver, tmp_path: Path
) -> None:
    spec = _spec(make_raw_image(tmp_path / "store"), ephemeral_gb=1)
    driver.spawn(spec)
    directory = driver.instances_path / spec.uuid
    before = {p.name: os.stat(p) for p in directory.iterdir() if p.name != "disk.info"}
    driver.destroy(spec.uuid)  # the guest gone, as after a crash between disks and define

    driver.spawn(spec)

    after = {p.name: os.stat(p) for p in directory.iterdir() if p.name != "disk.info"}
    assert {n: (s.st_ino, s.st_mtime_ns) for n, s in after.items()} == {
        n: (s.st_ino, s.st_mtime_ns) for n, s in before.items()
    }


class _CountingHandler(http.server.SimpleHTTPRequestHandler):
    gets = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).gets += 1
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_concurrent_builds_fetch_an_http_image_once(driver: LibvirtDriver, tmp_path: Path) -> None:
    local = make_raw_image(tmp_path / "store")
    handler = type("Handler", (_CountingHandler,), {"gets": 0})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0),
        lambda *a: handler(*a, directory=str(tmp_path / "store")),  # type: ignore[misc]
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{Path(local.location).name}"
    image = ImageSpec(
        id=local.id, name=local.name, location=url, checksum=local.checksum, size=local.size
    )
    try:
        threads = [threading.Thread(target=driver.spawn, args=(_spec(image, n),)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        server.shutdown()
        server.server_close()

    assert handler.gets == 1
    assert sorted(driver.list_instance_uuids()) == UUIDS[:4]


# -- the base's info, asked once ------------------------------------------------------------


def test_a_base_files_info_is_asked_once_until_the_file_is_replaced(
    driver: LibvirtDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[Path] = []
    real_info = qemu_img.info

    def counting_info(path: Path, backing_chain: bool = False) -> object:
        asked.append(path)
        return real_info(path, backing_chain)

    monkeypatch.setattr(qemu_img, "info", counting_info)
    image = make_raw_image(tmp_path / "store")
    base = _base(driver, image)
    driver.spawn(_spec(image, n=0))
    driver.spawn(_spec(image, n=1))  # its base touched, not changed: not asked again
    assert asked.count(base) == 1

    # A base fetched again (a new file renamed into place) is asked again.
    replacement = base.with_name(".replacement")
    replacement.write_bytes(base.read_bytes())
    os.replace(replacement, base)
    driver.spawn(_spec(image, n=2))
    assert asked.count(base) == 2
    assert qemu_img_info(driver.instances_path / UUIDS[2] / "disk")["virtual-size"] == GIB


# -- overlays of a kind already made ---------------------------------------------------------


def test_an_overlay_of_a_kind_already_made_is_qemu_imgs_bytes_without_running_it(
    driver: LibvirtDriver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    created: list[Path] = []
    real_create = qemu_img.create

    def counting_create(path: Path, *args: Any) -> None:
        created.append(path)
        real_create(path, *args)

    monkeypatch.setattr(qemu_img, "create", counting_create)
    image = make_raw_image(tmp_path / "store")
    driver.spawn(_spec(image, n=0))
    driver.spawn(_spec(image, n=1))
    assert len(created) == 1
    first, second = (driver.instances_path / UUIDS[n] / "disk" for n in (0, 1))
    assert second.read_bytes() == first.read_bytes()
    assert oct(second.stat().st_mode & 0o777) == oct(first.stat().st_mode & 0o777)
    overlay, base = qemu_img_info(second, chain=True)
    assert (overlay["format"], overlay["virtual-size"]) == ("qcow2", GIB)
    assert base["filename"] == str(_base(driver, image))

    # Another size, or a base fetched again (a new file), is qemu-img's to make again.
    driver.spawn(_spec(image, n=2, root_gb=2))
    replacement = _base(driver, image).with_name(".replacement")
    replacement.write_bytes(_base(driver, image).read_bytes())
    os.replace(replacement, _base(driver, image))
    driver.spawn(_spec(image, n=3))
    assert len(created) == 3
    assert qemu_img_info(driver.instances_path / UUIDS[2] / "disk")["virtual-size"] == 2 * GIB
