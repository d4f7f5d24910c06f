"""The move steps moving real disk files between two simulated hosts' instance
directories (libvirt test:///, tiny images, SQLite): copied at resize_instance, grown at
finish_resize, the source's originals kept until confirm removes them or revert puts them
back; a shrink refused with nothing moved; redelivered steps harmless; same-host resize."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from compute import moves
from compute.build import guest_spec
from compute.claims import ResourceRequest, consumer_allocations
from compute.instance_actions import start_action
from compute.instance_state import cas_update, get_instance
from compute.sessions import sessions_for
from models.db import session_scope
from models.flavor import FlavorSnapshot
from novaq.exceptions import ResizeError
from scheduler.manager import MoveScheduler, Scheduler
from tests.disk_images import make_raw_image, qemu_img_info
from tests.factories import (
    add_migration,
    claim,
    flavor_dict,
    make_compute_node,
    make_instance,
    make_settings,
    rewind_migration_status,
    set_migration_status,
    spec_for,
)
from tests.unit.compute.conftest import Hosts
from virt import power_state
from virt.simulated import SimulatedHostDriver

GIB = 1024**3
OLD = flavor_dict(1, 512, 1, ephemeral_gb=1, swap=16)
NEW = flavor_dict(2, 1024, 2, ephemeral_gb=2, swap=32)
SMALLER = flavor_dict(3, 1024, 0, ephemeral_gb=1)


def _server(
    db_url: str, hosts: Hosts, tmp_path: Path, dest_hosts: tuple[str, ...], src_service: bool = True
) -> str:
    """A server of a real image running on src (spawned by the driver, as a build does);
    without ``src_service`` the source's services row is left to the test."""
    nodes = {
        h: make_compute_node(db_url, h, service=src_service or h != "src")
        for h in {"src", *dest_hosts}
    }
    uuid = make_instance(
        db_url, flavor=OLD, host="src", node="src", vm_state="active", request_spec={"flavor": OLD}
    )
    claim(db_url, nodes["src"], uuid, ResourceRequest.from_flavor(FlavorSnapshot.load(OLD)))
    with session_scope(db_url) as session:
        spec = guest_spec(session, get_instance(session, uuid))
    image = make_raw_image(tmp_path / "store", "cirros")
    hosts["src"].spawn(dataclasses.replace(spec, image=image))
    return uuid


def _request(db_url: str, uuid: str, new: dict[str, Any], same_host: bool = False) -> str:
    """api.resize's migration, placed by the scheduler (on src itself if ``same_host``)."""
    with session_scope(db_url) as session:
        cas_update(session, uuid, task_state="resize_prep")
        instance = get_instance(session, uuid)
        instance.system_metadata = {"old_vm_state": "active"}
        migration = add_migration(
            session,
            uuid,
            source_compute="src",
            old_flavor=OLD,
            new_flavor=new,
            request_id="req-test",
            context={"request_spec": {"flavor": OLD}},
        )
        start_action(session, uuid, "resize", "req-test")
    ignore = () if same_host else ("src",)
    MoveScheduler(Scheduler(make_settings())).select(
        sessions_for(db_url), spec_for(uuid, new, ignore_hosts=ignore), migration
    )
    return migration


def _ctx(db_url: str, migration: str, driver: SimulatedHostDriver, host: str) -> Any:
    return moves.MoveContext(
        sessions_for(db_url), driver, host, "req-test", migration_uuid=migration
    )


def _forward(db_url: str, migration: str, hosts: Hosts, dest: str = "dst") -> None:
    moves.prep_resize(_ctx(db_url, migration, hosts[dest], dest))
    moves.resize_instance(_ctx(db_url, migration, hosts["src"], "src"))
    moves.finish_resize(_ctx(db_url, migration, hosts[dest], dest))


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def _size(path: Path) -> int:
    return int(qemu_img_info(path)["virtual-size"])


def _set(db_url: str, uuid: str, migration: str, status: str, task: str | None) -> None:
    with session_scope(db_url) as session:
        set_migration_status(session, migration, status)
        get_instance(session, uuid).task_state = task
        if status == "confirming":
            # api.confirm_resize starts an action of its own (the resize's has ended),
            # here under the tests' one request id.
            start_action(session, uuid, "confirmResize", "req-test")


def _rewind(db_url: str, uuid: str, migration: str, status: str, task: str | None) -> None:
    with session_scope(db_url) as session:
        rewind_migration_status(session, migration, status)
        get_instance(session, uuid).task_state = task


def test_resize_copies_the_disks_grows_them_on_the_destination_and_confirm_drops_the_source(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid = _server(db_url, hosts, tmp_path, ("dst",))
    migration = _request(db_url, uuid, NEW)
    src, dst = hosts["src"].instances_path, hosts["dst"].instances_path

    moves.prep_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    with session_scope(db_url) as session:
        assert moves.get_migration(session, migration).context.dest_instances_path == str(dst)
    moves.resize_instance(_ctx(db_url, migration, hosts["src"], "src"))
    assert not (src / uuid).exists()
    assert _names(src / f"{uuid}_resize") == ["disk", "disk.eph0", "disk.info", "disk.swap"]
    assert _names(dst / uuid) == ["disk", "disk.eph0", "disk.info"]  # swap is made anew
    moves.finish_resize(_ctx(db_url, migration, hosts["dst"], "dst"))

    root, base = qemu_img_info(dst / uuid / "disk", chain=True)
    assert root["virtual-size"] == 2 * GIB
    assert Path(base["filename"]).parent == dst / "_base"  # this host's own base file
    assert _size(dst / uuid / "disk.eph0") == 2 * GIB
    assert _size(dst / uuid / "disk.swap") == 32 * 1024**2
    assert hosts["dst"].get_info(uuid).vcpus == 2
    assert _size(src / f"{uuid}_resize" / "disk") == GIB  # the originals, untouched

    _set(db_url, uuid, migration, "confirming", None)
    moves.confirm_resize(_ctx(db_url, migration, hosts["src"], "src"))
    assert not hosts["src"].instance_files_exist(uuid)
    assert _names(dst / uuid) == ["disk", "disk.eph0", "disk.info", "disk.swap"]


def test_revert_drops_the_destinations_copy_and_restarts_the_guest_on_its_originals(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid = _server(db_url, hosts, tmp_path, ("dst",))
    migration = _request(db_url, uuid, NEW)
    _forward(db_url, migration, hosts)
    src = hosts["src"].instances_path

    _set(db_url, uuid, migration, "reverting", "resize_reverting")
    moves.revert_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    moves.finish_revert_resize(_ctx(db_url, migration, hosts["src"], "src"))

    assert not hosts["dst"].instance_files_exist(uuid)
    assert not (src / f"{uuid}_resize").exists()
    assert _size(src / uuid / "disk") == GIB and _size(src / uuid / "disk.eph0") == GIB
    info = hosts["src"].get_info(uuid)
    assert (info.power_state, info.vcpus) == (power_state.RUNNING, 1)


def test_a_shrink_is_refused_before_anything_moves_and_the_move_rolls_back(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid = _server(db_url, hosts, tmp_path, ("dst",))
    migration = _request(db_url, uuid, SMALLER)
    moves.prep_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    src, dst = hosts["src"].instances_path, hosts["dst"].instances_path
    before = _names(src / uuid)

    with pytest.raises(ResizeError, match="Unable to resize disk down"):
        moves.resize_instance(_ctx(db_url, migration, hosts["src"], "src"))

    assert _names(src / uuid) == before and not (src / f"{uuid}_resize").exists()
    assert not (dst / uuid).exists()
    assert hosts["src"].get_info(uuid).power_state == power_state.RUNNING
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.host) == ("active", None, "src")
        assert moves.get_migration(session, migration).status == "error"
        assert consumer_allocations(session, migration) == {}
        assert consumer_allocations(session, uuid)["VCPU"] == 1
    assert not moves.abort_move(sessions_for(db_url), migration, ResizeError(reason="x"), "src")


def test_redelivered_resize_and_finish_steps_are_harmless(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid = _server(db_url, hosts, tmp_path, ("dst",))
    migration = _request(db_url, uuid, NEW)
    dst = hosts["dst"].instances_path
    moves.prep_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    # The first delivery moved the disks, then its worker died before recording it.
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        old = moves.guest_spec(session, instance, FlavorSnapshot.load(OLD), [])
        new = moves.guest_spec(session, instance, FlavorSnapshot.load(NEW), [])
    hosts["src"].migrate_disk_and_power_off(old, new, str(dst))
    moves.resize_instance(_ctx(db_url, migration, hosts["src"], "src"))
    moves.finish_resize(_ctx(db_url, migration, hosts["dst"], "dst"))
    disk_before = (dst / uuid / "disk").stat()

    _rewind(db_url, uuid, migration, "post-migrating", "resize_finish")
    moves.finish_resize(_ctx(db_url, migration, hosts["dst"], "dst"))

    disk_after = (dst / uuid / "disk").stat()
    assert (disk_after.st_ino, disk_after.st_mtime_ns) == (
        disk_before.st_ino,
        disk_before.st_mtime_ns,
    )
    assert _size(dst / uuid / "disk") == 2 * GIB
    assert hosts["dst"].get_info(uuid).power_state == power_state.RUNNING


@pytest.mark.parametrize("ending", ["confirm", "revert"])
def test_a_same_host_resize_works_from_the_resize_directory(
    db_url: str, hosts: Hosts, tmp_path: Path, ending: str
) -> None:
    uuid = _server(db_url, hosts, tmp_path, ())
    migration = _request(db_url, uuid, NEW, same_host=True)
    src = hosts["src"].instances_path
    _forward(db_url, migration, hosts, dest="src")
    assert _size(src / uuid / "disk") == 2 * GIB
    assert _size(src / f"{uuid}_resize" / "disk") == GIB

    if ending == "confirm":
        _set(db_url, uuid, migration, "confirming", None)
        moves.confirm_resize(_ctx(db_url, migration, hosts["src"], "src"))
        assert _size(src / uuid / "disk") == 2 * GIB
    else:
        _set(db_url, uuid, migration, "reverting", "resize_reverting")
        moves.revert_resize(_ctx(db_url, migration, hosts["src"], "src"))
        moves.finish_revert_resize(_ctx(db_url, migration, hosts["src"], "src"))
        assert _size(src / uuid / "disk") == GIB
    assert not (src / f"{uuid}_resize").exists()
    assert hosts["src"].get_info(uuid).power_state == power_state.RUNNING
