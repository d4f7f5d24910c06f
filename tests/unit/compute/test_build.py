from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import delete, select, update

from compute.build import BuildAttempt, build_and_run_instance, fail_build
from compute.claims import ResourceRequest, consumer_allocations
from compute.delete import local_delete, terminate_instance
from compute.instance_actions import latest_fault
from compute.instance_state import get_instance
from compute.resource_tracker import update_available_resource
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import ComputeNode, Image, InstanceAction
from models.db import session_scope
from models.pci_device import ALLOCATED, AVAILABLE, CLAIMED
from novaq.exceptions import HypervisorError, ImageNotFound, ImageUnacceptable, NoValidHost
from novaq.settings import get_settings
from tests.factories import (
    CIRROS_ID,
    add_pci_device,
    claim,
    host_resources,
    make_compute_node,
    make_instance,
    make_settings,
    node_row,
)
from virt.driver import GuestInfo, GuestSpec
from virt.fake import FakeDriver, SpawnFailingDriver
from virt.host_profile import HostProfile
from virt.simulated import SimulatedHostDriver


def _placed_instance(db_url: str) -> tuple[str, int]:
    """An instance the scheduler has claimed on host1 (host and node set, allocations held)."""
    node_id = make_compute_node(db_url, "host1")
    uuid = make_instance(db_url, host="host1", node="host1")
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid, node_id


def _events(db_url: str, uuid: str) -> list[tuple[str, str | None]]:
    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction).where(InstanceAction.instance_uuid == uuid)
        ).one()
        return [(e.event, e.result) for e in action.events]


def test_build_spawns_the_guest_and_makes_the_instance_active(db_url: str) -> None:
    uuid, _ = _placed_instance(db_url)
    driver = FakeDriver(host_resources("host1"))
    result = build_and_run_instance(
        StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid
    )
    assert result.outcome == "active"
    assert driver.get_info(uuid).power_state == 1
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.power_state) == ("active", None, 1)
        assert instance.launched_at is not None
        action = session.scalars(select(InstanceAction)).one()
        assert action.finish_time is not None and action.message is None
    assert _events(db_url, uuid) == [("compute__do_build_and_run_instance", "Success")]


def test_redelivered_build_does_nothing_the_second_time(db_url: str) -> None:
    uuid, _ = _placed_instance(db_url)
    driver = FakeDriver(host_resources("host1"))
    build_and_run_instance(StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid)
    again = build_and_run_instance(
        StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid
    )
    assert again.outcome == "skipped"
    assert driver.spawn_count == 1


def test_spawn_failure_errors_the_instance_with_a_fault_and_releases_the_claim(db_url: str) -> None:
    uuid, node_id = _placed_instance(db_url)
    driver = SpawnFailingDriver(host_resources("host1"))
    with pytest.raises(HypervisorError):
        build_and_run_instance(StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.host) == ("error", None, None)
        fault = latest_fault(session, uuid)
        assert fault is not None and fault.code == 500 and "Hypervisor error" in fault.message
        assert fault.details and "Traceback" in fault.details
        assert consumer_allocations(session, uuid) == {}
    assert node_row(db_url, node_id).memory_mb_used == 512
    assert _events(db_url, uuid) == [("compute__do_build_and_run_instance", "Error")]
    assert driver.list_instance_uuids() == []


def test_a_build_whose_image_was_purged_is_aborted_with_a_fault_and_no_claim(
    db_url: str,
) -> None:
    uuid, node_id = _placed_instance(db_url)
    with session_scope(db_url) as session:
        session.execute(delete(Image).where(Image.id == CIRROS_ID))
    driver = FakeDriver(host_resources("host1"))
    with pytest.raises(ImageNotFound):
        build_and_run_instance(StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.host) == ("error", None, None)
        fault = latest_fault(session, uuid)
        assert fault is not None and fault.message == f"Image {CIRROS_ID} could not be found."
        assert consumer_allocations(session, uuid) == {}
    assert node_row(db_url, node_id).memory_mb_used == 512
    assert driver.spawn_count == 0


def test_fail_build_is_idempotent(db_url: str) -> None:
    uuid, _ = _placed_instance(db_url)
    assert fail_build(sessions_for(db_url), uuid, "req-test", NoValidHost(reason="x"), host=None)
    assert not fail_build(
        sessions_for(db_url), uuid, "req-test", NoValidHost(reason="x"), host=None
    )
    with session_scope(db_url) as session:
        fault = latest_fault(session, uuid)
        assert fault is not None and fault.code == 500
        assert fault.message.startswith("No valid host was found.")


def test_instance_deleted_while_spawning_loses_its_guest(db_url: str) -> None:
    uuid, _ = _placed_instance(db_url)

    class DeletingDriver(FakeDriver):
        def spawn(self, spec):  # type: ignore[no-untyped-def]
            info = super().spawn(spec)
            local_delete(sessions_for(db_url), uuid, "req-delete")  # the user deletes mid-spawn
            return info

    driver = DeletingDriver(host_resources("host1"))
    result = build_and_run_instance(
        StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid
    )
    assert result.outcome == "skipped"
    assert driver.list_instance_uuids() == []
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).vm_state == "deleted"
        assert consumer_allocations(session, uuid) == {}


def test_a_heal_during_a_deleted_spawn_leaves_no_orphan_count_behind(db_url: str) -> None:
    """The user deletes mid-spawn and an ``update_available_resource`` runs before the
    build notices: it counts the running guest as an orphan. The build's cleanup destroys
    the guest and gives that count back."""
    uuid, node_id = _placed_instance(db_url)

    class DeletingDriver(FakeDriver):
        def spawn(self, spec):  # type: ignore[no-untyped-def]
            info = super().spawn(spec)
            local_delete(sessions_for(db_url), uuid, "req-delete")
            heals = update_available_resource(sessions_for(db_url), self, "host1", make_settings())
            assert [h["action"] for h in heals] == ["orphan_counted"]
            return info

    driver = DeletingDriver(host_resources("host1"))
    assert (
        build_and_run_instance(
            StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid
        ).outcome
        == "skipped"
    )
    assert driver.list_instance_uuids() == []
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid) == {}
    assert node_row(db_url, node_id).memory_mb_used == 512


def test_terminate_destroys_the_guest_releases_and_soft_deletes(db_url: str) -> None:
    uuid, node_id = _placed_instance(db_url)
    driver = FakeDriver(host_resources("host1"))
    build_and_run_instance(StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid)
    with session_scope(db_url) as session:
        from compute.instance_actions import start_action

        start_action(session, uuid, "delete", "req-delete")
    assert (
        terminate_instance(StepContext(sessions_for(db_url), driver, "host1", "req-delete"), uuid)
        == "deleted"
    )
    assert (
        terminate_instance(StepContext(sessions_for(db_url), driver, "host1", "req-delete"), uuid)
        == "skipped"
    )
    assert driver.list_instance_uuids() == []
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert instance.vm_state == "deleted" and instance.deleted == instance.id
        assert instance.deleted_at is not None and instance.terminated_at is not None
        assert consumer_allocations(session, uuid) == {}
    assert node_row(db_url, node_id).vcpus_used == 0


def test_local_delete_of_an_instance_that_never_reached_a_host(db_url: str) -> None:
    uuid = make_instance(db_url, vm_state="error", task_state=None)
    local_delete(sessions_for(db_url), uuid, "req-test")
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).vm_state == "deleted"


def test_a_build_whose_image_fails_its_checksum_is_aborted_not_rescheduled(
    db_url: str, tmp_path: Path
) -> None:
    """Nova's BuildAbortException for an unacceptable image: no alternate is tried (every
    host would fetch the same data) and the host's failed-build count stays as it was."""
    uuid, node_id = _placed_instance(db_url)
    alternate_node = make_compute_node(db_url, "host2")
    (get_settings().image_store_path / CIRROS_ID).write_bytes(b"tampered")
    driver = SimulatedHostDriver(
        HostProfile("host1"), tmp_path / "hosts" / "host1", instances_path=tmp_path / "host1"
    )
    attempt = BuildAttempt(
        number=1, max_attempts=3, alternates=(("host2", "host2", alternate_node),)
    )
    try:
        with pytest.raises(ImageUnacceptable, match="failed its checksum"):
            build_and_run_instance(
                StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid, attempt
            )
        assert not driver.instance_exists(uuid)
        assert not (tmp_path / "host1" / uuid).exists()
    finally:
        driver.close()
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.host) == ("error", None, None)
        fault = latest_fault(session, uuid)
        assert fault is not None and "failed its checksum" in fault.message
        assert consumer_allocations(session, uuid) == {}
    assert node_row(db_url, node_id).memory_mb_used == 512  # the reserved amount only
    assert node_row(db_url, alternate_node).memory_mb_used == 512
    assert (node_row(db_url, node_id).stats or {}).get("failed_builds", 0) == 0


def test_the_guest_gets_the_pci_devices_the_instance_holds_in_address_order(
    db_url: str,
) -> None:
    uuid, node_id = _placed_instance(db_url)
    rows = [
        ("0000:0b:00.0", ALLOCATED, uuid, 0),
        ("0000:0a:00.0", CLAIMED, uuid, 0),
        ("0000:0c:00.0", ALLOCATED, uuid, 1),  # a deleted row
        ("0000:0d:00.0", ALLOCATED, "someone-else", 0),
        ("0000:0e:00.0", AVAILABLE, None, 0),
    ]
    for address, status, consumer, deleted in rows:
        add_pci_device(db_url, node_id, address, consumer, status, deleted)
    specs: list[GuestSpec] = []

    class Recording(FakeDriver):
        def spawn(self, spec: GuestSpec) -> GuestInfo:
            specs.append(spec)
            return super().spawn(spec)

    driver = Recording(host_resources("host1"))
    build_and_run_instance(StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid)
    assert [spec.pci_addresses for spec in specs] == [("0000:0a:00.0", "0000:0b:00.0")]


def test_a_success_resets_the_hosts_count_of_failed_builds(db_url: str) -> None:
    """The finish reads the host's nodes' stats only when its row says one counts a
    failure (``InstanceRow.host_failed_builds``); either way a success leaves none."""
    driver = FakeDriver(host_resources("host1"))
    uuid, node_id = _placed_instance(db_url)
    ctx = StepContext(sessions_for(db_url), driver, "host1", "req-test")
    with session_scope(db_url) as session:
        session.execute(
            update(ComputeNode).where(ComputeNode.id == node_id).values(stats={"failed_builds": 2})
        )
    assert build_and_run_instance(ctx, uuid).outcome == "active"
    assert node_row(db_url, node_id).stats["failed_builds"] == 0

    other = make_instance(db_url, host="host1", node="host1")
    claim(db_url, node_id, other, ResourceRequest(1, 512, 1))
    assert build_and_run_instance(ctx, other).outcome == "active"  # none to reset
    assert node_row(db_url, node_id).stats["failed_builds"] == 0
