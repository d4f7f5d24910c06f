"""``_heal_instance_info_cache``: one instance per run, rotating through the host's
instances by the database (oldest cache first), the cache holding what the domain XML
says the guest is attached to. Real SQLite rows and a simulated ``test:///`` host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from compute.build import guest_spec
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from compute.periodic.info_cache import heal_instance_info_cache
from compute.sessions import sessions_for
from models import InstanceInfoCache, utcnow
from models.db import session_scope
from tests.factories import flavor_dict, host_resources, make_instance, make_settings
from virt.driver import ComputeDriver
from virt.fake import FakeDriver
from virt.simulated import SimulatedHostDriver

GPU = "0000:08:00.0"


def _ctx(db_url: str, driver: ComputeDriver) -> PeriodicContext:
    settings = make_settings(heal_instance_info_cache_interval=60)
    return PeriodicContext(sessions_for(db_url), settings, "host1", driver)


def _server(
    db_url: str, driver: ComputeDriver | None, pci: tuple[str, ...] = (), **values: Any
) -> str:
    """An ACTIVE instance on host1 (unless ``values`` say otherwise) with its guest."""
    state = dict(host="host1", node="host1", vm_state="active", task_state=None)
    uuid = make_instance(db_url, flavor_dict(swap=64), launched_at=utcnow(), **{**state, **values})
    if driver is not None:
        with session_scope(db_url) as session:
            driver.spawn(guest_spec(session, get_instance(session, uuid), pci_addresses=pci))
    return uuid


def _caches(db_url: str) -> dict[str, dict[str, Any]]:
    with session_scope(db_url) as session:
        return {c.instance_uuid: c.device_info for c in session.scalars(select(InstanceInfoCache))}


def _heal(db_url: str, driver: ComputeDriver, runs: int) -> list[str | None]:
    return [heal_instance_info_cache(_ctx(db_url, driver))["instance"] for _ in range(runs)]


def test_the_cache_holds_the_disks_pci_devices_and_console_of_the_domain_xml(
    db_url: str, hypervisor: SimulatedHostDriver, tmp_path: Path
) -> None:
    uuid = _server(db_url, hypervisor, pci=(GPU,))

    assert heal_instance_info_cache(_ctx(db_url, hypervisor)) == {
        "instance": uuid,
        "refreshed": True,
    }

    disks = tmp_path / "inst" / uuid
    assert _caches(db_url)[uuid] == {
        "disks": [
            {"target_dev": "vda", "source_path": str(disks / "disk"), "bus": "virtio"},
            {"target_dev": "vdb", "source_path": str(disks / "disk.swap"), "bus": "virtio"},
        ],
        "pci_devices": [GPU],
        "consoles": [{"type": "pty", "target_type": "serial", "port": 0}],
    }


def test_runs_rotate_through_every_instance_of_the_host_then_start_over(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    uuids = [_server(db_url, hypervisor) for _ in range(3)]

    healed = _heal(db_url, hypervisor, 6)

    assert healed == uuids + uuids
    assert sorted(_caches(db_url)) == sorted(uuids)


def test_a_new_instance_is_healed_before_the_ones_already_cached(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    first, second = _server(db_url, hypervisor), _server(db_url, hypervisor)
    assert _heal(db_url, hypervisor, 1) == [first]
    newcomer = _server(db_url, hypervisor)

    assert _heal(db_url, hypervisor, 3) == [second, newcomer, first]


def test_a_cache_that_went_stale_is_refreshed_from_the_hypervisor(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    uuid = _server(db_url, hypervisor)
    with session_scope(db_url) as session:
        session.add(InstanceInfoCache(instance_uuid=uuid, device_info={"disks": []}))

    _heal(db_url, hypervisor, 1)

    assert [d["target_dev"] for d in _caches(db_url)[uuid]["disks"]] == ["vda", "vdb"]


@pytest.mark.parametrize(
    "state",
    [
        {"vm_state": "building", "task_state": "spawning"},
        {"task_state": "deleting"},
        {"task_state": "resize_migrating"},
        {"task_state": "resize_migrated"},
        {"task_state": "migrating"},
        {"host": "host2"},
        {"vm_state": "deleted", "deleted": 1},
    ],
    ids=[
        "building",
        "deleting",
        "resize_migrating",
        "resize_migrated",
        "migrating",
        "moved",
        "deleted",
    ],
)
def test_instances_building_deleting_or_moving_away_are_skipped(
    db_url: str, hypervisor: SimulatedHostDriver, state: dict[str, Any]
) -> None:
    skipped = _server(db_url, hypervisor, **state)
    healthy = _server(db_url, hypervisor)

    assert _heal(db_url, hypervisor, 2) == [healthy, healthy]
    assert skipped not in _caches(db_url)


def test_nothing_to_heal_is_a_quiet_run(db_url: str, hypervisor: SimulatedHostDriver) -> None:
    assert heal_instance_info_cache(_ctx(db_url, hypervisor)) == {"instance": None}


def test_an_instance_without_guest_keeps_its_cache_and_the_rotation_moves_on(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    missing = _server(db_url, None)
    with session_scope(db_url) as session:
        session.add(InstanceInfoCache(instance_uuid=missing, device_info={"pci_devices": [GPU]}))
    present = _server(db_url, hypervisor)

    assert heal_instance_info_cache(_ctx(db_url, hypervisor)) == {
        "instance": missing,
        "refreshed": False,
    }
    assert _caches(db_url)[missing] == {"pci_devices": [GPU]}
    assert _heal(db_url, hypervisor, 2) == [present, missing]


def test_the_fake_driver_describes_a_guest_as_the_libvirt_one_does(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    fake = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, hypervisor, pci=(GPU,))
    with session_scope(db_url) as session:
        fake.spawn(guest_spec(session, get_instance(session, uuid), pci_addresses=(GPU,)))

    real, faked = hypervisor.guest_devices(uuid), fake.guest_devices(uuid)

    assert faked["pci_devices"] == real["pci_devices"] and faked["consoles"] == real["consoles"]
    assert [d["target_dev"] for d in faked["disks"]] == [d["target_dev"] for d in real["disks"]]
