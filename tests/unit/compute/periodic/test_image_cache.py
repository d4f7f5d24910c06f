"""``_run_image_cache_manager_pass`` on a simulated host (libvirt test:///) with a real
base image cache in ``tmp_path`` (tiny real images, fetched by spawn) and SQLite: images
are in use when a non-deleted instance of this host boots from them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute.claims import ResourceRequest
from compute.delete import local_delete
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from compute.periodic.image_cache import images_in_use, run_image_cache_manager_pass
from compute.sessions import sessions_for
from models.db import session_scope
from tests.disk_images import make_raw_image
from tests.factories import claim, make_compute_node, make_image_ref, make_instance, make_settings
from virt.driver import GuestSpec
from virt.host_profile import HostProfile
from virt.libvirt.imagecache import cache_file_name
from virt.simulated import SimulatedHostDriver

HOUR_S = 3600


@pytest.fixture
def host(tmp_path: Path) -> Iterator[SimulatedHostDriver]:
    driver = SimulatedHostDriver(
        HostProfile("host1"), tmp_path / "hosts" / "host1", instances_path=tmp_path / "host1"
    )
    driver.init_host("host1")
    yield driver
    driver.close()


def _ctx(db_url: str, driver: SimulatedHostDriver, **image_cache: Any) -> PeriodicContext:
    options = {"remove_unused_original_minimum_age_seconds": HOUR_S, **image_cache}
    return PeriodicContext(
        sessions_for(db_url), make_settings(image_cache=options), "host1", driver
    )


def _server(db_url: str, driver: SimulatedHostDriver, image: str, swap_mb: int = 0) -> str:
    """A server of ``image`` on host1 whose guest the driver spawned (fetching the image)."""
    node_id = make_compute_node(db_url, "host1")
    make_image_ref(db_url, image)
    uuid = make_instance(db_url, host="host1", node="host1", image_ref=image, vm_state="active")
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    spec = make_raw_image(driver.state_dir.parent / "images", image)  # the image store
    driver.spawn(
        GuestSpec(
            uuid=uuid,
            name=f"i-{uuid[:8]}",
            vcpus=1,
            memory_mb=64,
            root_gb=1,
            image=spec,
            swap_mb=swap_mb,
        )
    )
    return uuid


def _delete(db_url: str, driver: SimulatedHostDriver, uuid: str) -> None:
    """A delete: guest and files gone from the host, the row deleted."""
    driver.destroy(uuid)
    assert driver.delete_instance_files(uuid)
    local_delete(sessions_for(db_url), uuid, "req-delete")


def _base_file(driver: SimulatedHostDriver, image: str) -> Path:
    return driver.instances_path / "_base" / cache_file_name(image)


def _age(driver: SimulatedHostDriver, image: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(_base_file(driver, image), (then, then))


def _cached(driver: SimulatedHostDriver) -> set[str]:
    return {path.name for path in (driver.instances_path / "_base").iterdir()}


def test_an_unused_old_base_image_is_removed_a_used_and_a_young_unused_one_kept(
    db_url: str, host: SimulatedHostDriver
) -> None:
    _server(db_url, host, "cirros")
    _delete(db_url, host, _server(db_url, host, "ubuntu"))  # unused, old
    _delete(db_url, host, _server(db_url, host, "fedora"))  # unused, young
    _age(host, "cirros", 2 * HOUR_S)
    _age(host, "ubuntu", 2 * HOUR_S)

    result = run_image_cache_manager_pass(_ctx(db_url, host))

    assert result == {
        "in_use": ["cirros"],
        "missing": [],
        "removed": ["ubuntu"],
        "kept_unused": ["fedora"],
    }
    assert _cached(host) == {cache_file_name("cirros"), cache_file_name("fedora")}
    # In use means used now: the cirros base file starts aging again from this pass.
    assert time.time() - _base_file(host, "cirros").stat().st_mtime < 60


def test_nothing_is_removed_when_remove_unused_base_images_is_off(
    db_url: str, host: SimulatedHostDriver
) -> None:
    _delete(db_url, host, _server(db_url, host, "ubuntu"))
    _age(host, "ubuntu", 2 * HOUR_S)

    result = run_image_cache_manager_pass(_ctx(db_url, host, remove_unused_base_images=False))

    assert (result["removed"], result["kept_unused"]) == ([], ["ubuntu"])
    assert _base_file(host, "ubuntu").exists()


def test_images_in_use_are_those_of_this_hosts_non_deleted_servers_soft_deleted_included(
    db_url: str, host: SimulatedHostDriver
) -> None:
    _server(db_url, host, "cirros")
    soft = _server(db_url, host, "soft-image")
    with session_scope(db_url) as session:
        get_instance(session, soft).vm_state = "soft-delete"
    local_delete(sessions_for(db_url), _server(db_url, host, "gone-image"), "req-delete")
    make_compute_node(db_url, "host2")
    make_instance(db_url, host="host2", node="host2", image_ref="host2-image")
    make_instance(db_url, image_ref="unscheduled-image")  # no host yet

    with session_scope(db_url) as session:
        assert images_in_use(session, "host1") == {"cirros", "soft-image"}


def test_an_image_in_use_with_no_base_file_is_reported_missing(
    db_url: str, host: SimulatedHostDriver
) -> None:
    _server(db_url, host, "cirros")
    _base_file(host, "cirros").unlink()

    result = run_image_cache_manager_pass(_ctx(db_url, host))

    assert (result["in_use"], result["missing"]) == ([], ["cirros"])


def test_an_unused_old_swap_base_is_removed_and_a_used_one_kept(
    db_url: str, host: SimulatedHostDriver
) -> None:
    _server(db_url, host, "cirros", swap_mb=1)
    _delete(db_url, host, _server(db_url, host, "cirros", swap_mb=2))
    for name in ("swap_1", "swap_2"):
        then = time.time() - 2 * HOUR_S
        os.utime(host.instances_path / "_base" / name, (then, then))

    result = run_image_cache_manager_pass(_ctx(db_url, host))

    assert result["removed"] == ["swap_2"]
    assert (host.instances_path / "_base" / "swap_1").exists()
