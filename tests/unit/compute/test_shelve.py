"""Shelve, offload, unshelve, soft delete, restore and reclaim on a compute host (the
in-memory driver): state sequences, what the guest and the allocations become, and
Nova's outcome of each failure."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from sqlalchemy import select

from compute import shelve, soft_delete
from compute.claims import ResourceRequest, consumer_allocations
from compute.instance_actions import latest_fault
from compute.instance_state import cas_update, get_instance
from compute.sessions import sessions_for
from compute.steps import StepContext
from compute.usage import expected_consumers
from models import ComputeNode, InstanceAction, utcnow
from models.db import session_scope
from models.flavor import FlavorSnapshot
from novaq.exceptions import HypervisorError, NoValidHost
from scheduler.manager import Scheduler
from scheduler.unshelve import select_for_unshelve
from tests.factories import (
    claim,
    flavor_dict,
    host_resources,
    make_compute_node,
    make_instance,
    make_settings,
)
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec
from virt.fake import FakeDriver, SpawnFailingDriver

REQUEST = "req-shelve"
FLAVOR = flavor_dict(2, 2048, 10)


def _ctx(db_url: str, driver: ComputeDriver, host: str = "host1") -> StepContext:
    return StepContext(sessions_for(db_url), driver, host, REQUEST)


def _server(db_url: str, driver: FakeDriver, vm_state: str, task_state: str | None) -> str:
    """A launched instance on host1 holding its claim, its guest in the matching state."""
    node_id = make_compute_node(db_url, "host1")
    uuid = make_instance(
        db_url,
        FLAVOR,
        host="host1",
        node="host1",
        vm_state=vm_state,
        task_state=task_state,
        power_state=power_state.RUNNING,
        launched_at=utcnow(),
        request_id=REQUEST,
    )
    claim(db_url, node_id, uuid, ResourceRequest.from_flavor(FlavorSnapshot.load(FLAVOR)))
    driver.spawn(
        GuestSpec(uuid=uuid, name="instance-00000001", vcpus=2, memory_mb=2048, root_gb=10)
    )
    if vm_state in ("stopped", "soft-delete", "shelved"):
        driver.power_off(uuid)
    elif vm_state == "paused":
        driver.pause(uuid)
    elif vm_state == "suspended":
        driver.suspend(uuid)
    return uuid


def _instance(db_url: str, uuid: str) -> dict[str, Any]:
    with session_scope(db_url) as session:
        i = get_instance(session, uuid)
        return {
            "vm_state": i.vm_state,
            "task_state": i.task_state,
            "power_state": i.power_state,
            "host": i.host,
            "node": i.node,
            "deleted": bool(i.deleted),
            "deleted_at": i.deleted_at,
            "system_metadata": dict(i.system_metadata or {}),
        }


def _allocations(db_url: str, uuid: str) -> dict[str, int]:
    with session_scope(db_url) as session:
        return consumer_allocations(session, uuid)


def _events(db_url: str, uuid: str) -> list[tuple[str, str | None]]:
    with session_scope(db_url) as session:
        rows = session.scalars(select(InstanceAction).where(InstanceAction.instance_uuid == uuid))
        return [(e.event, e.result) for a in rows for e in a.events]


def _fault(db_url: str, uuid: str) -> str | None:
    with session_scope(db_url) as session:
        fault = latest_fault(session, uuid)
        return None if fault is None else fault.message


def _set(db_url: str, uuid: str, **values: Any) -> None:
    with session_scope(db_url) as session:
        cas_update(session, uuid, **values)


def _node_used(db_url: str) -> int:
    with session_scope(db_url) as session:
        node = session.scalars(select(ComputeNode).where(ComputeNode.host == "host1")).one()
        return node.memory_mb_used


# -- shelve and offload -----------------------------------------------------------------


@pytest.mark.parametrize("before", ["active", "stopped", "paused", "suspended"])
def test_shelve_without_offload_keeps_the_guest_off_and_the_claim(db_url: str, before: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, before, "shelving")
    held = _allocations(db_url, uuid)
    assert shelve.shelve_instance(_ctx(db_url, driver), uuid, offload=False) == "done"
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"], view["host"]) == ("shelved", None, "host1")
    meta = view["system_metadata"]
    assert meta["shelved_host"] == "host1" and meta["shelved_image_id"] and meta["shelved_at"]
    assert driver.instance_exists(uuid)
    assert driver.get_info(uuid).power_state != power_state.RUNNING
    assert _allocations(db_url, uuid) == held  # a shelved server still consumes
    assert _events(db_url, uuid) == [("compute_shelve_instance", "Success")]


def test_shelve_with_offload_destroys_the_guest_and_releases_everything(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "shelving")
    idle = _node_used(db_url) - FLAVOR["memory_mb"]
    assert shelve.shelve_instance(_ctx(db_url, driver), uuid) == "done"
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"], view["host"], view["node"]) == (
        "shelved_offloaded",
        None,
        None,
        None,
    )
    assert view["power_state"] == power_state.NOSTATE
    assert "shelved_image_id" in view["system_metadata"]
    assert not driver.instance_exists(uuid)
    assert _allocations(db_url, uuid) == {}
    assert _node_used(db_url) == idle
    assert _events(db_url, uuid) == [("compute_shelve_instance", "Success")]


def test_shelve_offload_of_a_shelved_server(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "shelved", "shelving_offloading")
    assert shelve.shelve_offload_instance(_ctx(db_url, driver), uuid) == "done"
    assert _instance(db_url, uuid)["vm_state"] == "shelved_offloaded"
    assert _allocations(db_url, uuid) == {} and not driver.instance_exists(uuid)
    assert not driver.instance_files_exist(uuid)  # unshelve spawns anew, maybe elsewhere
    assert _events(db_url, uuid) == [("compute_shelve_offload_instance", "Success")]
    # redelivered: the state moved on, nothing happens
    assert shelve.shelve_offload_instance(_ctx(db_url, driver), uuid) == "skipped"


def test_an_offload_whose_guest_is_already_gone_completes(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "shelved", "shelving_offloading")
    driver.destroy(uuid)  # gone behind novaq's back: Nova's power-off tolerates it too
    assert shelve.shelve_offload_instance(_ctx(db_url, driver), uuid) == "done"
    assert _instance(db_url, uuid)["vm_state"] == "shelved_offloaded"
    assert _allocations(db_url, uuid) == {}


def test_a_failed_shelve_reverts_the_task_with_a_fault(db_url: str) -> None:
    class Failing(FakeDriver):
        def power_off(self, uuid: str, timeout_s: float = 0) -> None:
            raise HypervisorError(reason="simulated power off failure")

    driver = Failing(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "shelving")
    with pytest.raises(HypervisorError):
        shelve.shelve_instance(_ctx(db_url, driver), uuid)
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"]) == ("active", None)
    assert "simulated power off failure" in (_fault(db_url, uuid) or "")
    assert _events(db_url, uuid) == [("compute_shelve_instance", "Error")]
    assert _allocations(db_url, uuid)


# -- unshelve ---------------------------------------------------------------------------


def _offloaded(db_url: str, driver: FakeDriver) -> str:
    uuid = _server(db_url, driver, "active", "shelving")
    shelve.shelve_instance(_ctx(db_url, driver), uuid)
    _set(db_url, uuid, task_state="unshelving")
    return uuid


def test_unshelve_claims_a_host_and_spawns_the_guest_there(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _offloaded(db_url, driver)
    selection = select_for_unshelve(sessions_for(db_url), Scheduler(make_settings()), uuid)
    assert selection is not None and selection.host == "host1" and not selection.alternates
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"], view["host"]) == (
        "shelved_offloaded",
        "unshelving",
        "host1",
    )
    assert _allocations(db_url, uuid) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10}
    with session_scope(db_url) as session:  # the heal must keep the claim of an unshelve
        node = session.scalars(select(ComputeNode)).one()
        assert uuid in expected_consumers(session, node)
    # redelivered scheduling: the same host, nothing claimed twice
    assert select_for_unshelve(sessions_for(db_url), Scheduler(make_settings()), uuid) == selection
    assert shelve.unshelve_instance(_ctx(db_url, driver), uuid) == "done"
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"], view["power_state"]) == (
        "active",
        None,
        power_state.RUNNING,
    )
    assert not set(view["system_metadata"]) & {"shelved_at", "shelved_image_id", "shelved_host"}
    assert driver.get_info(uuid).power_state == power_state.RUNNING
    assert ("compute_unshelve_instance", "Success") in _events(db_url, uuid)


def test_unshelve_with_no_valid_host_leaves_the_claim_unmade(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _offloaded(db_url, driver)
    with session_scope(db_url) as session:
        get_instance(session, uuid).flavor = flavor_dict(64, 2048, 10)
    with pytest.raises(NoValidHost):
        select_for_unshelve(sessions_for(db_url), Scheduler(make_settings()), uuid)
    assert _instance(db_url, uuid)["host"] is None and _allocations(db_url, uuid) == {}


def test_a_failed_unshelve_spawn_releases_the_claim_and_the_host(db_url: str) -> None:
    uuid = _offloaded(db_url, FakeDriver(host_resources("host1")))
    select_for_unshelve(sessions_for(db_url), Scheduler(make_settings()), uuid)
    driver = SpawnFailingDriver(host_resources("host1"))
    with pytest.raises(HypervisorError, match="refuses to start guests"):
        shelve.unshelve_instance(_ctx(db_url, driver), uuid)
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"], view["host"], view["node"]) == (
        "shelved_offloaded",
        None,
        None,
        None,
    )
    assert _allocations(db_url, uuid) == {} and _fault(db_url, uuid)
    assert ("compute_unshelve_instance", "Error") in _events(db_url, uuid)


# -- soft delete, restore, reclaim --------------------------------------------------------


def test_soft_delete_powers_off_and_keeps_the_claim_then_restore(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "soft-deleting")
    held = _allocations(db_url, uuid)
    assert soft_delete.soft_delete_instance(_ctx(db_url, driver), uuid) == "done"
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"], view["power_state"]) == (
        "soft-delete",
        None,
        power_state.SHUTDOWN,
    )
    assert not view["deleted"] and _allocations(db_url, uuid) == held
    _set(db_url, uuid, task_state="restoring", deleted_at=None)
    assert soft_delete.restore_instance(_ctx(db_url, driver), uuid) == "done"
    view = _instance(db_url, uuid)
    assert (view["vm_state"], view["task_state"], view["power_state"]) == (
        "active",
        None,
        power_state.RUNNING,
    )
    assert [e for e, _ in _events(db_url, uuid)] == [
        "compute_soft_delete_instance",
        "compute_restore_instance",
    ]


def test_reclaim_hard_deletes_what_was_soft_deleted_longer_than_the_interval(
    db_url: str,
) -> None:
    driver = FakeDriver(host_resources("host1"))
    old = _server(db_url, driver, "soft-delete", None)
    _set(db_url, old, deleted_at=utcnow() - dt.timedelta(seconds=10))
    recent = make_instance(
        db_url,
        FLAVOR,
        host="host1",
        node="host1",
        vm_state="soft-delete",
        task_state=None,
        launched_at=utcnow(),
        deleted_at=utcnow(),
    )
    busy = make_instance(
        db_url,
        FLAVOR,
        host="host1",
        node="host1",
        vm_state="soft-delete",
        task_state="restoring",
        launched_at=utcnow(),
        deleted_at=utcnow() - dt.timedelta(seconds=10),
    )
    assert (
        soft_delete.reclaim_queued_deletes(sessions_for(db_url), driver, "host1", make_settings())
        == []
    )
    settings = make_settings(reclaim_instance_interval=5)
    assert soft_delete.reclaim_queued_deletes(sessions_for(db_url), driver, "host1", settings) == [
        old
    ]
    view = _instance(db_url, old)
    assert (view["vm_state"], view["deleted"]) == ("deleted", True)
    assert not driver.instance_exists(old) and _allocations(db_url, old) == {}
    assert _instance(db_url, recent)["vm_state"] == "soft-delete"
    assert _instance(db_url, busy)["task_state"] == "restoring"
    assert soft_delete.reclaim_queued_deletes(sessions_for(db_url), driver, "host1", settings) == []
