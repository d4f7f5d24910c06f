"""The threshold passes (``compute.periodic.timeouts``, ``resize_confirm``, ``deferred``)
that need only the database and the hypervisor: real SQLite rows, a fresh libvirt
``test:///`` node per test, thresholds shrunk to seconds and timestamps set that far in
the past."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from compute.claims import ResourceRequest, consumer_allocations
from compute.instance_actions import latest_fault, start_action
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext, deferred, resize_confirm, timeouts
from compute.sessions import sessions_for
from models import InstanceAction, Migration, utcnow
from models.db import session_scope
from novaq.exceptions import HypervisorError
from tests.factories import claim, make_compute_node, make_instance, make_migration, make_settings
from virt import power_state
from virt.driver import GuestSpec
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.node_xml import test_uri, write_node_xml

LONG_AGO = 600  # seconds: past every shrunk threshold below
THRESHOLD = 60  # seconds


@pytest.fixture
def hypervisor(tmp_path: Path) -> Iterator[LibvirtDriver]:
    """host1's hypervisor: libvirt's test driver on its own node file."""
    node = write_node_xml(HostProfile("host1"), tmp_path / "node")
    driver = LibvirtDriver(test_uri(node), instances_path=tmp_path / "instances")
    driver.init_host("host1")
    yield driver
    driver.close()


@pytest.fixture
def node_id(db_url: str) -> int:
    make_compute_node(db_url, "host2")
    return make_compute_node(db_url, "host1")


def _ctx(db_url: str, driver: LibvirtDriver, **settings: Any) -> PeriodicContext:
    return PeriodicContext(sessions_for(db_url), make_settings(**settings), "host1", driver)


def _ago(seconds: int) -> dt.datetime:
    return utcnow() - dt.timedelta(seconds=seconds)


def _server(db_url: str, node_id: int | None, action: str = "create", **state: Any) -> str:
    """An instance on host1 (unless ``host`` says otherwise) holding its claim, with the
    ``action`` that put it in its state as the latest."""
    values: dict[str, Any] = dict(host="host1", node="host1", launched_at=_ago(LONG_AGO))
    values.update(state)
    uuid = make_instance(db_url, **values)
    if action != "create":
        with session_scope(db_url) as session:
            start_action(session, uuid, action, f"req-{action}")
    if node_id is not None:
        claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid


def _guest(driver: LibvirtDriver, uuid: str, running: bool = True) -> None:
    driver.spawn(GuestSpec(uuid=uuid, name=f"guest-{uuid[:8]}", vcpus=1, memory_mb=512, root_gb=1))
    if not running:
        driver.power_off(uuid)


def _state(db_url: str, uuid: str) -> tuple[Any, ...]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        return instance.vm_state, instance.task_state, instance.host


def _held(db_url: str, consumer: str) -> dict[str, int]:
    with session_scope(db_url) as session:
        return consumer_allocations(session, consumer)


def _events(db_url: str, uuid: str, action: str) -> list[tuple[str, str | None]]:
    with session_scope(db_url) as session:
        row = session.scalars(
            select(InstanceAction).where(
                InstanceAction.instance_uuid == uuid, InstanceAction.action == action
            )
        ).one()
        return [(e.event, e.result) for e in row.events]


# -- check_instance_build_time --------------------------------------------------------------


@pytest.mark.parametrize("task_state", ["spawning", "scheduling"])
def test_a_build_stuck_past_instance_build_timeout_goes_to_error_and_frees_its_claim(
    db_url: str, node_id: int, hypervisor: LibvirtDriver, task_state: str
) -> None:
    uuid = _server(
        db_url, node_id, task_state=task_state, launched_at=None, created_at=_ago(LONG_AGO)
    )
    if task_state == "spawning":
        _guest(hypervisor, uuid)  # the hung spawn's half-built guest
    ctx = _ctx(db_url, hypervisor, instance_build_timeout=THRESHOLD)
    assert timeouts.check_instance_build_time(ctx) == {"errored": [uuid], "failed": []}
    assert _state(db_url, uuid) == ("error", None, None)
    assert _held(db_url, uuid) == {}
    assert not hypervisor.instance_exists(uuid)
    with session_scope(db_url) as session:
        fault = latest_fault(session, uuid)
        assert fault is not None and "timed out" in fault.message
    assert _events(db_url, uuid, "create") == [(timeouts.BUILD_TIMEOUT_EVENT, "Error")]
    assert timeouts.check_instance_build_time(ctx)["errored"] == []  # idempotent


def test_builds_younger_than_the_timeout_or_on_another_host_are_left_building(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    young = _server(db_url, node_id, task_state="spawning", launched_at=None)
    _guest(hypervisor, young)
    elsewhere = _server(
        db_url, None, task_state="spawning", host="host2", node="host2", created_at=_ago(LONG_AGO)
    )
    ctx = _ctx(db_url, hypervisor, instance_build_timeout=THRESHOLD)
    assert timeouts.check_instance_build_time(ctx)["errored"] == []
    assert _state(db_url, young) == ("building", "spawning", "host1")
    assert _state(db_url, elsewhere) == ("building", "spawning", "host2")
    assert _held(db_url, young) != {} and hypervisor.instance_exists(young)


# -- poll_rebooting_instances ---------------------------------------------------------------


def _stuck_reboot(db_url: str, node_id: int, task_state: str, **state: Any) -> str:
    values = dict(vm_state="active", task_state=task_state, updated_at=_ago(LONG_AGO))
    return _server(db_url, node_id, "reboot", **(values | state))


def test_a_stuck_soft_reboot_of_a_running_guest_is_finished_active(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _stuck_reboot(db_url, node_id, "reboot_started")
    _guest(hypervisor, uuid)
    result = timeouts.poll_rebooting_instances(_ctx(db_url, hypervisor, reboot_timeout=THRESHOLD))
    assert result == {"finished": [uuid], "rebooted_hard": [], "failed": []}
    assert _state(db_url, uuid) == ("active", None, "host1")
    assert _events(db_url, uuid, "reboot") == [(timeouts.REBOOT_POLL_EVENT, "Success")]


def test_a_stuck_soft_reboot_of_a_guest_that_is_off_is_rebooted_hard(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _stuck_reboot(db_url, node_id, "rebooting")
    _guest(hypervisor, uuid, running=False)
    result = timeouts.poll_rebooting_instances(_ctx(db_url, hypervisor, reboot_timeout=THRESHOLD))
    assert result == {"finished": [], "rebooted_hard": [uuid], "failed": []}
    assert _state(db_url, uuid) == ("active", None, "host1")
    assert hypervisor.get_info(uuid).power_state == power_state.RUNNING
    assert _events(db_url, uuid, "reboot") == [
        (timeouts.REBOOT_POLL_EVENT, "Success"),
        ("compute_reboot_instance", "Success"),
    ]


def test_a_stuck_reboot_whose_guest_is_gone_defines_it_again(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    """A hard reboot defines the guest from fresh XML, as Nova's ``_hard_reboot``, so a
    guest the hypervisor lost comes back."""
    uuid = _stuck_reboot(db_url, node_id, "reboot_pending")
    result = timeouts.poll_rebooting_instances(_ctx(db_url, hypervisor, reboot_timeout=THRESHOLD))
    assert result == {"finished": [], "rebooted_hard": [uuid], "failed": []}
    assert _state(db_url, uuid) == ("active", None, "host1")
    assert hypervisor.get_info(uuid).power_state == power_state.RUNNING


def test_a_stuck_reboot_that_cannot_reboot_hard_ends_in_error_with_a_fault(
    db_url: str, node_id: int, hypervisor: LibvirtDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = _stuck_reboot(db_url, node_id, "reboot_pending")

    def refuse(spec: object, hard: bool) -> None:
        raise HypervisorError(reason="the hypervisor refuses")

    monkeypatch.setattr(hypervisor, "reboot", refuse)
    result = timeouts.poll_rebooting_instances(_ctx(db_url, hypervisor, reboot_timeout=THRESHOLD))
    assert result == {"finished": [], "rebooted_hard": [], "failed": [uuid]}
    assert _state(db_url, uuid) == ("error", None, "host1")
    with session_scope(db_url) as session:
        assert latest_fault(session, uuid) is not None


def test_reboots_within_the_timeout_hard_reboots_and_other_hosts_are_untouched(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    recent = _stuck_reboot(db_url, node_id, "reboot_started", updated_at=utcnow())
    hard = _stuck_reboot(db_url, node_id, "reboot_started_hard")
    elsewhere = _stuck_reboot(db_url, None, "rebooting", host="host2", node="host2")
    for uuid in (recent, hard):
        _guest(hypervisor, uuid, running=False)
    result = timeouts.poll_rebooting_instances(_ctx(db_url, hypervisor, reboot_timeout=THRESHOLD))
    assert result == {"finished": [], "rebooted_hard": [], "failed": []}
    assert _state(db_url, recent) == ("active", "reboot_started", "host1")
    assert _state(db_url, hard) == ("active", "reboot_started_hard", "host1")
    assert _state(db_url, elsewhere) == ("active", "rebooting", "host2")
    assert hypervisor.get_info(recent).power_state == power_state.SHUTDOWN


# -- poll_shelved_instances -----------------------------------------------------------------


def _shelved(db_url: str, node_id: int | None, shelved_at: dt.datetime, **state: Any) -> str:
    meta = {"shelved_at": shelved_at.isoformat(), "shelved_host": "host1"}
    values = dict(vm_state="shelved", task_state=None, system_metadata=meta)
    return _server(db_url, node_id, "shelve", **(values | state))


def test_a_server_shelved_past_shelved_offload_time_is_offloaded(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _shelved(db_url, node_id, _ago(LONG_AGO))
    _guest(hypervisor, uuid, running=False)  # shelve powered it off and kept it
    ctx = _ctx(db_url, hypervisor, shelved_offload_time=THRESHOLD)
    assert deferred.poll_shelved_instances(ctx) == {"offloaded": [uuid], "failed": []}
    assert _state(db_url, uuid) == ("shelved_offloaded", None, None)
    assert _held(db_url, uuid) == {}
    assert not hypervisor.instance_exists(uuid)
    assert _events(db_url, uuid, "shelve") == [("compute_shelve_offload_instance", "Success")]


def test_a_locked_shelved_server_is_offloaded_too_as_nova_does(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    meta = {"shelved_at": _ago(LONG_AGO).isoformat(), "locked": True}
    uuid = _shelved(db_url, node_id, _ago(LONG_AGO), system_metadata=meta)
    _guest(hypervisor, uuid, running=False)
    ctx = _ctx(db_url, hypervisor, shelved_offload_time=THRESHOLD)
    assert deferred.poll_shelved_instances(ctx)["offloaded"] == [uuid]
    assert _state(db_url, uuid) == ("shelved_offloaded", None, None)


def test_shelved_servers_not_yet_due_busy_unreadable_or_elsewhere_are_kept(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    kept = [
        _shelved(db_url, node_id, utcnow()),
        _shelved(db_url, node_id, _ago(LONG_AGO), task_state="unshelving"),
        _shelved(db_url, node_id, _ago(LONG_AGO), system_metadata={}),
        _shelved(db_url, None, _ago(LONG_AGO), host="host2", node="host2"),
    ]
    before = [_state(db_url, uuid) for uuid in kept]
    ctx = _ctx(db_url, hypervisor, shelved_offload_time=THRESHOLD)
    assert deferred.poll_shelved_instances(ctx) == {"offloaded": [], "failed": []}
    assert [_state(db_url, uuid) for uuid in kept] == before
    assert _held(db_url, kept[0]) != {}


def test_a_shelved_offload_time_of_zero_or_less_offloads_nothing(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _shelved(db_url, node_id, _ago(LONG_AGO))
    for value in (0, -1):
        ctx = _ctx(db_url, hypervisor, shelved_offload_time=value)
        assert deferred.poll_shelved_instances(ctx)["offloaded"] == []
    assert _state(db_url, uuid) == ("shelved", None, "host1")


# -- poll_unconfirmed_resizes: the cases that end before the API ----------------------------


def _migration(db_url: str, instance_uuid: str, dest: str = "host1", age: int = LONG_AGO) -> str:
    return make_migration(
        db_url,
        instance_uuid,
        status="finished",
        source_compute="host2",
        dest_compute=dest,
        updated_at=_ago(age),
    )


def _status(db_url: str, migration_uuid: str) -> str:
    with session_scope(db_url) as session:
        row = session.scalars(select(Migration).where(Migration.uuid == migration_uuid)).one()
        return row.status


@pytest.mark.parametrize(
    ("vm_state", "task_state", "deleted"),
    [("error", None, False), ("active", None, False), ("resized", "deleting", True)],
)
def test_a_resize_past_the_window_that_cannot_be_confirmed_errors_its_migration(
    db_url: str,
    node_id: int,
    hypervisor: LibvirtDriver,
    vm_state: str,
    task_state: str | None,
    deleted: bool,
) -> None:
    uuid = _server(db_url, node_id, "resize", vm_state=vm_state, task_state=task_state)
    migration = _migration(db_url, uuid)
    claim(db_url, node_id, migration, ResourceRequest(1, 512, 1))  # what it holds
    if deleted:
        with session_scope(db_url) as session:
            get_instance(session, uuid).deleted = 1
    ctx = _ctx(db_url, hypervisor, resize_confirm_window=THRESHOLD)
    summary = resize_confirm.poll_unconfirmed_resizes(ctx)
    assert summary == {"confirming": [], "skipped": [], "errored": [migration], "failed": []}
    assert _status(db_url, migration) == "error"
    # Only a migration whose server is gone gives back what it held.
    assert (_held(db_url, migration) == {}) is deleted


@pytest.mark.parametrize("task_state", ["deleting", "soft-deleting", "resize_finish"])
def test_a_resize_being_deleted_or_still_finishing_is_skipped(
    db_url: str, node_id: int, hypervisor: LibvirtDriver, task_state: str
) -> None:
    uuid = _server(db_url, node_id, "resize", vm_state="resized", task_state=task_state)
    migration = _migration(db_url, uuid)
    ctx = _ctx(db_url, hypervisor, resize_confirm_window=THRESHOLD)
    assert resize_confirm.poll_unconfirmed_resizes(ctx)["skipped"] == [migration]
    assert _status(db_url, migration) == "finished"


def test_resizes_inside_the_window_or_to_another_host_are_not_looked_at(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _server(db_url, node_id, "resize", vm_state="error", task_state=None)
    young = _migration(db_url, uuid, age=0)
    elsewhere = _migration(db_url, uuid, dest="host2")
    ctx = _ctx(db_url, hypervisor, resize_confirm_window=THRESHOLD)
    summary = resize_confirm.poll_unconfirmed_resizes(ctx)
    assert summary == {"confirming": [], "skipped": [], "errored": [], "failed": []}
    assert _status(db_url, young) == _status(db_url, elsewhere) == "finished"


# -- reclaim_queued_deletes -----------------------------------------------------------------


def test_a_server_soft_deleted_past_reclaim_instance_interval_is_reclaimed(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    soft = dict(vm_state="soft-delete", task_state=None)
    due = _server(db_url, node_id, "delete", deleted_at=_ago(LONG_AGO), **soft)
    recent = _server(db_url, node_id, "delete", deleted_at=utcnow(), **soft)
    elsewhere = _server(
        db_url, None, "delete", deleted_at=_ago(LONG_AGO), host="host2", node="host2", **soft
    )
    for uuid in (due, recent):
        _guest(hypervisor, uuid, running=False)
    ctx = _ctx(db_url, hypervisor, reclaim_instance_interval=THRESHOLD)
    assert deferred.reclaim_queued_deletes(ctx) == {"reclaimed": [due]}
    assert _state(db_url, due)[0] == "deleted" and _held(db_url, due) == {}
    assert not hypervisor.instance_exists(due)
    assert _state(db_url, recent) == ("soft-delete", None, "host1")
    assert _state(db_url, elsewhere) == ("soft-delete", None, "host2")
    assert hypervisor.instance_exists(recent) and _held(db_url, recent) != {}
