"""``compute.instance_row``: the light row a ``light_row`` step (the terminate, the build)
is begun and finished on. It reads what the ORM ``Instance`` reads (the runner's checks,
the notifications' payload, the build's guest and the terminate's values give the same
answers from either), says whether the instance has an unfinished move, and writes
through one UPDATE."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import select, update

from compute.build import BUILD, build_and_run_instance
from compute.claims import ResourceRequest
from compute.delete import TERMINATE, terminate_instance
from compute.guest import guest_spec, instance_name
from compute.instance_actions import add_fault, start_action
from compute.instance_row import InstanceRow, locked_row, write_row
from compute.instance_state import get_instance
from compute.migrations import get_migration
from compute.notifications import _payload
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import ComputeNode, InstanceAction
from models.db import session_scope
from models.pci_device import CLAIMED, REMOVED
from novaq.exceptions import HypervisorError, InstanceNotFound
from tests.factories import (
    add_pci_device,
    claim,
    host_resources,
    make_compute_node,
    make_instance,
    make_migration,
    node_row,
    register_cirros,
)
from tests.unit.compute.conftest import Sent
from virt.driver import GuestInfo, GuestSpec
from virt.fake import FakeDriver


def _row(db_url: str, uuid: str, with_fault: bool = False) -> tuple[InstanceRow, str | None]:
    with session_scope(db_url) as session:
        return locked_row(session, uuid, with_fault=with_fault)


def test_the_row_holds_what_the_orm_instance_holds(db_url: str) -> None:
    uuid = make_instance(db_url, host="host1", node="host1", display_name="vm")
    row, fault = _row(db_url, uuid)

    assert fault is None and row.moving is False
    with session_scope(db_url, read_only=True) as session:
        instance = get_instance(session, uuid)
        for field in dataclasses.fields(InstanceRow):
            if field.name not in ("moving", "holds_pci", "host_failed_builds"):
                assert getattr(row, field.name) == getattr(instance, field.name), field.name
        # A notification's payload is the same from either.
        assert _payload(row, None, "req") == _payload(instance, None, "req")


def test_the_latest_fault_is_read_with_the_row(db_url: str) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    with session_scope(db_url) as session:
        add_fault(session, uuid, HypervisorError(reason="first"), "host1")
    with session_scope(db_url) as session:
        add_fault(session, uuid, HypervisorError(reason="second"), "host1")

    _, fault = _row(db_url, uuid, with_fault=True)

    assert fault is not None and "second" in fault
    assert _row(db_url, uuid)[1] is None  # not read unless asked for


@pytest.mark.parametrize(
    ("status", "moving"),
    [("pre-migrating", True), ("finished", True), ("confirmed", False), ("error", False)],
)
def test_moving_says_whether_a_migration_is_in_progress(
    db_url: str, status: str, moving: bool
) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    other = make_instance(db_url, host="host1", node="host1")
    make_migration(db_url, uuid, status=status, dest_compute="host2")
    make_migration(db_url, other)  # another instance's move is not this one's

    assert _row(db_url, uuid)[0].moving is moving


def test_holds_pci_says_whether_the_instance_holds_devices_when_asked(db_url: str) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    other = make_instance(db_url, host="host1", node="host1")
    node_id = make_compute_node(db_url, "host1")
    add_pci_device(db_url, node_id, "0000:0a:00.0", other)  # another's device is not its own
    add_pci_device(db_url, node_id, "0000:0b:00.0", uuid, deleted=1)  # nor a deleted row

    def holds(with_pci: bool) -> bool | None:
        with session_scope(db_url) as session:
            return locked_row(session, uuid, with_pci=with_pci)[0].holds_pci

    add_pci_device(db_url, node_id, "0000:0d:00.0", uuid, status=REMOVED)  # nor a gone one
    assert (holds(False), holds(True)) == (None, False)  # not read unless asked for
    add_pci_device(db_url, node_id, "0000:0c:00.0", uuid, status=CLAIMED)
    assert holds(True) is True
    with session_scope(db_url) as session:
        row, fault = locked_row(session, uuid, with_fault=True, with_pci=True)
        assert (row.holds_pci, row.moving, fault) == (True, False, None)


@pytest.mark.parametrize(
    ("stats", "failed"),
    [
        (None, False),
        ({}, False),
        ({"failed_builds": 0, "x": 1}, False),
        ({"failed_builds": 2}, True),
    ],
)
def test_host_failed_builds_says_whether_a_node_of_the_host_counts_failures(
    db_url: str, stats: dict[str, int] | None, failed: bool
) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    # Another host's failures are not this host's, nor those of a deleted node.
    gone = make_compute_node(db_url, "host1")
    _set_stats(db_url, gone, {"failed_builds": 5})
    with session_scope(db_url) as session:
        session.execute(update(ComputeNode).where(ComputeNode.id == gone).values(deleted=gone))
    _set_stats(db_url, make_compute_node(db_url, "host1"), stats)
    _set_stats(db_url, make_compute_node(db_url, "host2"), {"failed_builds": 1})

    with session_scope(db_url) as session:
        assert locked_row(session, uuid)[0].host_failed_builds is None  # not unless asked
        row, _ = locked_row(session, uuid, with_pci=True, failed_builds_of="host1")
        assert (row.holds_pci, row.host_failed_builds) == (False, failed)
        assert locked_row(session, uuid, failed_builds_of="host2")[0].host_failed_builds


def _set_stats(db_url: str, node_id: int, stats: dict[str, int] | None) -> None:
    with session_scope(db_url) as session:
        session.execute(update(ComputeNode).where(ComputeNode.id == node_id).values(stats=stats))


def test_write_row_writes_the_instance_and_sets_the_row(db_url: str) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    with session_scope(db_url) as session:
        row, _ = locked_row(session, uuid)
        write_row(session, row, {"vm_state": "error", "system_metadata": {"a": "1"}})
        assert (row.vm_state, row.system_metadata) == ("error", {"a": "1"})

    with session_scope(db_url, read_only=True) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.system_metadata) == ("error", {"a": "1"})


def test_a_missing_instance_is_not_found(db_url: str) -> None:
    with pytest.raises(InstanceNotFound):
        _row(db_url, "00000000-0000-0000-0000-000000000000")


def test_the_build_and_the_terminate_are_light_row_steps() -> None:
    assert BUILD.light_row and TERMINATE.light_row


def test_a_guest_from_the_row_is_the_guest_from_the_orm_instance(db_url: str) -> None:
    """The build's ``prepare`` reads the guest from its light row: the same spec (name,
    flavor, image, metadata) as from the ORM ``Instance``."""
    uuid = make_instance(db_url, host="host1", node="host1", display_name="vm")
    with session_scope(db_url) as session:
        row, _ = locked_row(session, uuid)
        instance = get_instance(session, uuid)
        assert instance_name(row) == instance_name(instance)
        pci = ("0000:0a:00.0",)
        assert guest_spec(session, row, pci) == guest_spec(session, instance, pci)


def test_a_terminate_on_postgresql_reads_and_writes_the_light_row(
    migrated_pg_url: str, state_dir: Path, sent: Sent
) -> None:
    """The row's statement (``FOR UPDATE OF instances`` with the fault's subquery and the
    move's EXISTS) on PostgreSQL, through a whole terminate: the server is deleted, its
    allocations released, its move ended, its notifications' payloads read from the row.
    Skipped when no PostgreSQL listens on 127.0.0.1:5432."""
    pg_db = migrated_pg_url
    register_cirros(pg_db, state_dir / "images")
    driver = FakeDriver(host_resources("host1"))
    node_id = make_compute_node(pg_db, "host1")
    uuid = make_instance(pg_db, host="host1", node="host1")
    claim(pg_db, node_id, uuid, ResourceRequest(1, 512, 1))
    sessions = sessions_for(pg_db)
    build_and_run_instance(StepContext(sessions, driver, "host1", "req-boot"), uuid)
    migration = make_migration(pg_db, uuid)
    with session_scope(pg_db) as session:
        start_action(session, uuid, "delete", "req-delete")
    with session_scope(pg_db) as session:
        assert locked_row(session, uuid)[0].moving is True
    sent.clear()

    ctx = StepContext(sessions, driver, "host1", "req-delete")
    assert terminate_instance(ctx, uuid, "delete") == "deleted"

    assert [m["event_type"] for m, _ in sent] == ["instance.delete.start", "instance.delete.end"]
    assert sent[1][0]["payload"]["nova_object.data"]["state"] == "deleted"
    with session_scope(pg_db, read_only=True) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.deleted) == ("deleted", instance.id)
        assert instance.system_metadata["clean_attempts"] == "1"
        assert get_migration(session, migration).status == "error"
    assert node_row(pg_db, node_id).vcpus_used == 0


def test_a_build_on_postgresql_reads_and_writes_the_light_row(
    migrated_pg_url: str, state_dir: Path, sent: Sent
) -> None:
    """The build's begin and finish on the light row on PostgreSQL (the row's statement
    with the PCI devices' EXISTS, and the host's failed builds read from JSON stats):
    the guest spawned from it (with the PCI device the instance holds), the server
    ACTIVE, the host's count of failed builds reset, its event and action closed, its
    ``create`` notifications' payloads read from the row. Skipped when no PostgreSQL
    listens on 127.0.0.1:5432."""
    pg_db = migrated_pg_url
    register_cirros(pg_db, state_dir / "images")
    node_id = make_compute_node(pg_db, "host1")
    uuid = make_instance(pg_db, host="host1", node="host1", display_name="vm")
    claim(pg_db, node_id, uuid, ResourceRequest(1, 512, 1))
    add_pci_device(pg_db, node_id, "0000:0a:00.0", uuid)
    _set_stats(pg_db, node_id, {"failed_builds": 3})  # a success resets the count
    specs: list[GuestSpec] = []

    class Recording(FakeDriver):
        def spawn(self, spec: GuestSpec) -> GuestInfo:
            specs.append(spec)
            return super().spawn(spec)

    driver = Recording(host_resources("host1"))
    ctx = StepContext(sessions_for(pg_db), driver, "host1", "req-test")

    assert build_and_run_instance(ctx, uuid, notify=True).outcome == "active"
    assert build_and_run_instance(ctx, uuid, notify=True).outcome == "skipped"

    [spec] = specs
    assert node_row(pg_db, node_id).stats["failed_builds"] == 0
    with session_scope(pg_db, read_only=True) as session:
        instance = get_instance(session, uuid)
        assert spec == guest_spec(session, instance, ("0000:0a:00.0",))
        assert (instance.vm_state, instance.task_state, instance.power_state) == ("active", None, 1)
        assert instance.launched_at is not None
        action = session.scalars(
            select(InstanceAction).where(InstanceAction.instance_uuid == uuid)
        ).one()
        assert action.finish_time is not None
        assert [(e.event, e.result) for e in action.events] == [
            ("compute__do_build_and_run_instance", "Success")
        ]
    events = [m["event_type"] for m, _ in sent]
    assert events[:2] == ["instance.create.start", "instance.create.end"]
    end = sent[1][0]["payload"]["nova_object.data"]
    assert (end["state"], end["task_state"], end["power_state"]) == ("active", None, "running")
    assert end["launched_at"] is not None and end["display_name"] == "vm"
