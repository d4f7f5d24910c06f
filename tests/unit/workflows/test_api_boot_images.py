"""``boot(image=...)`` against the image registry: Nova's refusals before anything is
written or sent, and what a server keeps of its image (image_ref, system metadata, the
request spec the scheduler's image filters read)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from compute.build import guest_spec
from compute.instance_state import get_instance
from models import Allocation, Image, ImageStatus, Instance
from models.db import session_scope
from novaq.exceptions import (
    FlavorDiskSmallerThanImage,
    FlavorDiskSmallerThanMinDisk,
    FlavorMemoryTooSmall,
    ImageNotActive,
    ImageNotFound,
    InvalidInput,
)
from novaq.settings import get_settings
from scheduler.request_spec import RequestSpec
from tests.factories import CIRROS_ID, make_image
from tests.unit.scheduler.filters.conftest import build_filter, build_host
from tests.unit.workflows.servers import action_count, clear_queues, queued
from workflows import api

GiB = 1024**3


@pytest.fixture(autouse=True)
def _flavors(db_url: str) -> Iterator[None]:
    api.create_flavor("m1", 1, 512, 1)
    api.create_flavor("zero", 1, 512, 0)
    yield
    clear_queues("scheduler")


def _data() -> Path:
    return get_settings().image_store_path / CIRROS_ID


def _nothing_written(db_url: str) -> None:
    with session_scope(db_url) as session:
        assert session.scalar(select(func.count()).select_from(Instance)) == 0
        assert session.scalar(select(func.count()).select_from(Allocation)) == 0
    assert action_count(db_url) == 0
    assert queued("scheduler") == 0


def _refused(db_url: str, error: type[Exception], message: str, image: str, flavor: str) -> None:
    with pytest.raises(error) as raised:
        api.boot("vm", flavor, image)
    assert str(raised.value) == message
    _nothing_written(db_url)


def test_an_unknown_image_is_refused_with_novas_message(db_url: str) -> None:
    _refused(db_url, ImageNotFound, "Image nope could not be found.", "nope", "m1")


@pytest.mark.parametrize("status", [ImageStatus.QUEUED, ImageStatus.DELETED])
def test_an_image_that_is_not_active_is_refused(db_url: str, status: ImageStatus) -> None:
    image_id = make_image(db_url, _data(), name="pending", status=status)
    _refused(db_url, ImageNotActive, f"Image {image_id} is not active.", image_id, "m1")


def test_an_image_larger_than_the_flavors_disk_is_refused(db_url: str) -> None:
    make_image(db_url, _data(), name="big", virtual_size=2 * GiB)
    message = (
        "Flavor's disk is too small for requested image. Flavor disk is "
        f"{GiB} bytes, image is {2 * GiB} bytes."
    )
    _refused(db_url, FlavorDiskSmallerThanImage, message, "big", "m1")


def test_an_image_whose_min_disk_exceeds_the_flavors_disk_is_refused(db_url: str) -> None:
    make_image(db_url, _data(), name="needs-disk", min_disk=5)
    message = (
        "Flavor's disk is smaller than the minimum size specified in image metadata. "
        f"Flavor disk is {GiB} bytes, minimum size is {5 * GiB} bytes."
    )
    _refused(db_url, FlavorDiskSmallerThanMinDisk, message, "needs-disk", "m1")


def test_an_image_whose_min_ram_exceeds_the_flavors_memory_is_refused(db_url: str) -> None:
    make_image(db_url, _data(), name="needs-ram", min_ram=1024)
    message = "Flavor's memory is too small for requested image."
    _refused(db_url, FlavorMemoryTooSmall, message, "needs-ram", "m1")


def test_a_zero_disk_flavor_skips_the_disk_checks_as_nova_does(db_url: str) -> None:
    make_image(db_url, _data(), name="big", virtual_size=50 * GiB, min_disk=40)
    [uuid] = api.boot("vm", "zero", "big")
    assert api.show(uuid)["status"] == "BUILD"


def test_a_name_shared_by_two_images_is_refused(db_url: str) -> None:
    make_image(db_url, _data(), name="twin")
    make_image(db_url, _data(), name="twin")
    with pytest.raises(InvalidInput, match="Multiple image matches found for 'twin'"):
        api.boot("vm", "m1", "twin")
    _nothing_written(db_url)


def _booted(db_url: str, image: str, **extra: Any) -> tuple[Instance, RequestSpec]:
    [uuid] = api.boot("vm", "m1", image, **extra)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        session.expunge(instance)
    return instance, RequestSpec.from_dict(instance.request_spec)


def test_boot_by_name_or_id_records_the_image_id_and_its_properties(db_url: str) -> None:
    props = {"hw_rescue_device": "cdrom", "os_shutdown_timeout": "30"}
    image_id = make_image(db_url, _data(), name="debian", properties=props, min_ram=128)

    for ref in ("debian", image_id):
        instance, spec = _booted(db_url, ref)
        assert instance.image_ref == image_id == spec.image
        assert (spec.image_name, spec.image_properties) == ("debian", props)
        assert instance.system_metadata == {
            "image_hw_rescue_device": "cdrom",
            "image_os_shutdown_timeout": "30",
            "image_min_ram": "128",
            "image_min_disk": "1",  # raised to the flavor's root_gb, as Nova does
            "image_disk_format": "raw",
            "image_container_format": "bare",
            "image_base_image_ref": image_id,
        }


def test_the_guest_boots_from_the_registrys_record_of_the_image(db_url: str) -> None:
    [uuid] = api.boot("web", "m1", "cirros")
    with session_scope(db_url) as session:
        spec = guest_spec(session, get_instance(session, uuid))
        image = session.get(Image, CIRROS_ID)
        assert image is not None
        assert spec.image is not None
        assert (spec.image.id, spec.image.name, spec.image.location) == (
            CIRROS_ID,
            "cirros",
            image.location,
        )
        assert (spec.image.checksum, spec.image.size) == (image.os_hash_value, image.size)
    assert (spec.display_name, spec.flavor_name) == ("web", "m1")


def test_image_properties_filter_reads_the_registrys_properties(db_url: str) -> None:
    make_image(db_url, _data(), name="arm", properties={"hw_architecture": "aarch64"})
    _, arm = _booted(db_url, "arm")
    _, plain = _booted(db_url, "cirros")
    flt = build_filter("ImagePropertiesFilter")
    x86 = build_host(supported_instances=(("x86_64", "kvm", "hvm"),))

    assert flt.host_passes(x86, arm) is False
    assert flt.host_passes(x86, plain) is True


@pytest.mark.parametrize("listed", ["iso", "id"])
def test_isolated_hosts_filter_matches_isolated_images_by_id_or_name(
    db_url: str, listed: str
) -> None:
    image_id = make_image(db_url, _data(), name="iso")
    _, spec = _booted(db_url, "iso")
    flt = build_filter(
        "IsolatedHostsFilter",
        filter_scheduler={
            "isolated_hosts": ["iso-host"],
            "isolated_images": [image_id if listed == "id" else "iso"],
        },
    )

    assert flt.host_passes(build_host("iso-host"), spec) is True
    assert flt.host_passes(build_host("plain-host"), spec) is False
