"""``compute.periodic.power_sync`` on real state: SQLite rows and a fresh libvirt
``test:///`` node per test. The stops it asks of the API are recorded by ``StopRecorder``
here (the API's own path is tested through a worker in
``tests/unit/workflows/test_periodic_power_sync.py``)."""

from __future__ import annotations

import datetime as dt
import logging
import uuid as uuid_module
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from compute.audit import audit_nodes
from compute.heal import release_destroyed_orphan
from compute.instance_state import cas_update, get_instance
from compute.periodic import PeriodicContext, power_sync
from compute.periodic.power_sync import decide
from compute.resource_tracker import update_available_resource
from models import Allocation, ComputeNode, Instance, ResourceHeal, utcnow
from models.db import session_scope
from novaq.exceptions import InstanceInvalidState
from tests.factories import make_instance, make_settings
from virt import power_state
from virt.driver import GuestInfo, GuestSpec
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.node_xml import test_uri, write_node_xml

RUNNING, PAUSED, SHUTDOWN = power_state.RUNNING, power_state.PAUSED, power_state.SHUTDOWN
CRASHED, SUSPENDED, NOSTATE = power_state.CRASHED, power_state.SUSPENDED, power_state.NOSTATE


class StopRecorder:
    """The two API calls the sync makes, recorded; ``refuse`` makes them raise as the
    API's gate does."""

    def __init__(self, refuse: bool = False) -> None:
        self.calls: list[tuple[str, str]] = []
        self.refuse = refuse

    def _call(self, name: str, uuid: str) -> str:
        self.calls.append((name, uuid))
        if self.refuse:
            raise InstanceInvalidState(
                action=name, uuid=uuid, vm_state="active", task_state="powering-off"
            )
        return "req-sync"

    def stop(self, uuid: str) -> str:
        return self._call("stop", uuid)

    def force_stop(self, uuid: str) -> str:
        return self._call("force_stop", uuid)


@pytest.fixture
def hypervisor(tmp_path: Path) -> Iterator[LibvirtDriver]:
    node = write_node_xml(HostProfile("host1", vcpus=64, memory_mb=262144), tmp_path / "node")
    driver = LibvirtDriver(test_uri(node), instances_path=tmp_path / "instances")
    driver.init_host("host1")
    yield driver
    driver.close()


def _ctx(
    db_url: str, driver: Any, api: Any = None, host: str = "host1", **settings: Any
) -> PeriodicContext:
    return PeriodicContext(db_url, make_settings(**settings), host, driver, api)


def _server(db_url: str, vm_state: str, power: int = RUNNING, **state: Any) -> str:
    values: dict[str, Any] = dict(
        host="host1",
        node="host1",
        vm_state=vm_state,
        task_state=None,
        power_state=power,
        launched_at=utcnow(),
    )
    values.update(state)
    return make_instance(db_url, **values)


def _guest(driver: LibvirtDriver, uuid: str, power: int = RUNNING) -> None:
    driver.spawn(GuestSpec(uuid=uuid, name=f"guest-{uuid[:8]}", vcpus=1, memory_mb=64, root_gb=1))
    if power == SHUTDOWN:
        driver.power_off(uuid)
    elif power == PAUSED:
        driver.pause(uuid)


def _power(db_url: str, uuid: str) -> int:
    with session_scope(db_url) as session:
        return get_instance(session, uuid).power_state


def _ago(seconds: int) -> dt.datetime:
    return utcnow() - dt.timedelta(seconds=seconds)


# -- the table ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vm_state", "power", "outcome"),
    [
        ("active", RUNNING, "in_sync"),
        ("active", SHUTDOWN, "stop"),
        ("active", CRASHED, "stop"),
        ("active", SUSPENDED, "stop"),
        ("active", PAUSED, "warn_paused"),
        ("active", NOSTATE, "warn_missing"),
        ("stopped", RUNNING, "force_stop"),
        ("stopped", PAUSED, "force_stop"),
        ("stopped", SUSPENDED, "force_stop"),
        ("stopped", SHUTDOWN, "in_sync"),
        ("stopped", CRASHED, "in_sync"),
        ("stopped", NOSTATE, "in_sync"),
        ("paused", SHUTDOWN, "force_stop"),
        ("paused", CRASHED, "force_stop"),
        ("paused", RUNNING, "in_sync"),
        ("paused", NOSTATE, "in_sync"),
        ("soft-delete", RUNNING, "warn_deleted"),
        ("soft-delete", PAUSED, "warn_deleted"),
        ("soft-delete", SHUTDOWN, "in_sync"),
        ("deleted", CRASHED, "warn_deleted"),
        ("deleted", NOSTATE, "in_sync"),
        ("building", SHUTDOWN, "in_sync"),
        ("rescued", RUNNING, "in_sync"),
        ("resized", SHUTDOWN, "in_sync"),
        ("suspended", RUNNING, "in_sync"),
        ("error", SHUTDOWN, "in_sync"),
        ("shelved", RUNNING, "in_sync"),
    ],
)
def test_decide_follows_novas_sync_instance_power_state_table(
    vm_state: str, power: int, outcome: str
) -> None:
    assert decide(vm_state, power) == outcome


# -- sync_power_states on real guests ---------------------------------------------------------


def test_an_active_server_whose_guest_shut_down_is_stopped_through_the_api(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = _server(db_url, "active")
    _guest(hypervisor, uuid, SHUTDOWN)  # powered off behind novaq's back
    api = StopRecorder()
    summary = power_sync.sync_power_states(_ctx(db_url, hypervisor, api))
    assert api.calls == [("stop", uuid)]
    assert summary["stop"] == [uuid] and summary["power_state_updated"] == [uuid]
    assert _power(db_url, uuid) == SHUTDOWN


@pytest.mark.parametrize(("vm_state", "guest"), [("stopped", RUNNING), ("paused", SHUTDOWN)])
def test_a_guest_out_of_step_with_a_stopped_or_paused_server_is_force_stopped(
    db_url: str, hypervisor: LibvirtDriver, vm_state: str, guest: int
) -> None:
    db_power = SHUTDOWN if vm_state == "stopped" else PAUSED
    uuid = _server(db_url, vm_state, db_power)
    _guest(hypervisor, uuid, guest)
    api = StopRecorder()
    summary = power_sync.sync_power_states(_ctx(db_url, hypervisor, api))
    assert api.calls == [("force_stop", uuid)]
    assert summary["force_stop"] == [uuid]
    assert _power(db_url, uuid) == guest


def test_unexpected_pause_missing_guest_and_running_soft_deleted_are_only_logged(
    db_url: str, hypervisor: LibvirtDriver, caplog: pytest.LogCaptureFixture
) -> None:
    paused = _server(db_url, "active")
    _guest(hypervisor, paused, PAUSED)
    missing = _server(db_url, "active")  # no guest at all
    soft_deleted = _server(db_url, "soft-delete", SHUTDOWN, deleted_at=utcnow())
    _guest(hypervisor, soft_deleted)
    api = StopRecorder()
    with caplog.at_level(logging.WARNING, logger=power_sync.__name__):
        summary = power_sync.sync_power_states(_ctx(db_url, hypervisor, api))
    assert api.calls == []
    assert (summary["warn_paused"], summary["warn_missing"]) == ([paused], [missing])
    assert summary["warn_deleted"] == [soft_deleted]
    assert (_power(db_url, paused), _power(db_url, missing)) == (PAUSED, NOSTATE)
    assert _power(db_url, soft_deleted) == RUNNING
    assert "is paused unexpectedly. Ignore." in caplog.text
    assert "is unexpectedly not found. Ignore." in caplog.text
    assert "is not (soft-)deleted." in caplog.text


@pytest.mark.parametrize("vm_state", ["rescued", "resized", "suspended", "error", "building"])
def test_states_nova_ignores_only_get_their_power_state_written(
    db_url: str, hypervisor: LibvirtDriver, vm_state: str
) -> None:
    uuid = _server(db_url, vm_state, RUNNING)
    _guest(hypervisor, uuid, SHUTDOWN)
    api = StopRecorder()
    summary = power_sync.sync_power_states(_ctx(db_url, hypervisor, api))
    assert api.calls == [] and summary["in_sync"] == [uuid]
    assert _power(db_url, uuid) == SHUTDOWN


def test_a_server_with_a_task_in_flight_is_left_alone(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = _server(db_url, "active", task_state="powering-off")
    _guest(hypervisor, uuid, SHUTDOWN)
    api = StopRecorder()
    summary = power_sync.sync_power_states(_ctx(db_url, hypervisor, api))
    assert summary["pending_task"] == [uuid] and api.calls == []
    assert _power(db_url, uuid) == RUNNING  # untouched: the stop in flight owns it


class RacingDriver(LibvirtDriver):
    """A hypervisor read during which a user's request takes the instance (the API's
    compare-and-swap to ``powering-on``), between the sync's first check and its write."""

    db_url = ""

    def get_info(self, uuid: str) -> GuestInfo:
        with session_scope(self.db_url) as session:
            cas_update(session, uuid, expected_task_state=[None], task_state="powering-on")
        return super().get_info(uuid)


def test_a_request_that_starts_during_the_hypervisor_read_wins(db_url: str, tmp_path: Path) -> None:
    node = write_node_xml(HostProfile("host1"), tmp_path / "node")
    driver = RacingDriver(test_uri(node), instances_path=tmp_path / "instances")
    driver.db_url = db_url
    uuid = _server(db_url, "stopped", SHUTDOWN)
    _guest(driver, uuid, RUNNING)
    api = StopRecorder()
    try:
        summary = power_sync.sync_power_states(_ctx(db_url, driver, api))
    finally:
        driver.close()
    assert summary["pending_task"] == [uuid] and api.calls == []
    assert _power(db_url, uuid) == SHUTDOWN  # not written under the request


def test_a_refused_stop_is_counted_and_the_other_servers_are_still_synced(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    refused = _server(db_url, "active")
    _guest(hypervisor, refused, SHUTDOWN)
    fine = _server(db_url, "active", NOSTATE)
    _guest(hypervisor, fine, RUNNING)
    summary = power_sync.sync_power_states(_ctx(db_url, hypervisor, StopRecorder(refuse=True)))
    assert summary["failed"] == [refused]
    assert summary["in_sync"] == [fine] and _power(db_url, fine) == RUNNING


def test_only_this_hosts_live_instances_are_synced_and_a_count_mismatch_is_warned(
    db_url: str, hypervisor: LibvirtDriver, caplog: pytest.LogCaptureFixture
) -> None:
    mine = _server(db_url, "active")
    _guest(hypervisor, mine)
    elsewhere = _server(db_url, "active", SHUTDOWN, host="host2", node="host2")
    deleted = _server(db_url, "deleted", NOSTATE, deleted=1, deleted_at=utcnow())
    _guest(hypervisor, deleted)  # a second guest: 2 on the hypervisor, 1 in the database
    with caplog.at_level(logging.WARNING, logger=power_sync.__name__):
        summary = power_sync.sync_power_states(_ctx(db_url, hypervisor, StopRecorder()))
    assert (summary["db_instances"], summary["hypervisor_instances"]) == (1, 2)
    assert summary["in_sync"] == [mine]
    assert (_power(db_url, elsewhere), _power(db_url, deleted)) == (SHUTDOWN, NOSTATE)
    assert "found 1 instances in the database and 2 instances on the hypervisor" in caplog.text


def test_the_thread_pool_syncs_many_servers_on_one_test_driver(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    states = [RUNNING, SHUTDOWN, PAUSED] * 8
    uuids = []
    for power in states:
        uuid = _server(db_url, "resized", NOSTATE)  # ignored vm_state: only the write
        _guest(hypervisor, uuid, power)
        uuids.append(uuid)
    summary = power_sync.sync_power_states(
        _ctx(db_url, hypervisor, StopRecorder(), sync_power_state_pool_size=5)
    )
    assert sorted(summary["power_state_updated"]) == sorted(uuids)
    assert [_power(db_url, uuid) for uuid in uuids] == states


# -- cleanup_running_deleted_instances ----------------------------------------------------------


def _deleted(db_url: str, hypervisor: LibvirtDriver, deleted_s_ago: int = 600) -> str:
    uuid = _server(
        db_url, "deleted", NOSTATE, deleted=1, deleted_at=_ago(deleted_s_ago), host="host1"
    )
    _guest(hypervisor, uuid)  # the delete never reached the hypervisor
    return uuid


def test_reap_destroys_the_guest_of_a_deleted_server_and_its_files(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = _deleted(db_url, hypervisor)
    assert hypervisor.instance_files_exist(uuid)
    ctx = _ctx(db_url, hypervisor, running_deleted_instance_action="reap")
    summary = power_sync.cleanup_running_deleted_instances(ctx)
    assert summary == {"action": "reap", "instances": [uuid], "failed": []}
    assert not hypervisor.instance_exists(uuid)
    assert not hypervisor.instance_files_exist(uuid)
    with session_scope(db_url) as session:  # counted as Nova's cleanup: nothing pending
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert instance.cleaned == 1
        assert instance.system_metadata["clean_attempts"] == "1"
    assert power_sync.cleanup_running_deleted_instances(ctx)["instances"] == []


def test_shutdown_powers_the_guest_off_and_keeps_it(db_url: str, hypervisor: LibvirtDriver) -> None:
    uuid = _deleted(db_url, hypervisor)
    ctx = _ctx(db_url, hypervisor, running_deleted_instance_action="shutdown")
    assert power_sync.cleanup_running_deleted_instances(ctx)["instances"] == [uuid]
    assert hypervisor.get_info(uuid).power_state == SHUTDOWN


def test_log_only_warns_with_novas_message(
    db_url: str, hypervisor: LibvirtDriver, caplog: pytest.LogCaptureFixture
) -> None:
    uuid = _deleted(db_url, hypervisor)
    ctx = _ctx(db_url, hypervisor, running_deleted_instance_action="log")
    with caplog.at_level(logging.WARNING, logger=power_sync.__name__):
        assert power_sync.cleanup_running_deleted_instances(ctx)["instances"] == [uuid]
    assert hypervisor.get_info(uuid).power_state == RUNNING
    with session_scope(db_url) as session:
        name = f"instance-{get_instance(session, uuid).id:08x}"
    assert (
        f"Detected instance with name label '{name}' which is marked as DELETED but still "
        "present on host." in caplog.text
    )


def test_noop_does_nothing(db_url: str, hypervisor: LibvirtDriver) -> None:
    uuid = _deleted(db_url, hypervisor)
    ctx = _ctx(db_url, hypervisor, running_deleted_instance_action="noop")
    assert power_sync.cleanup_running_deleted_instances(ctx)["instances"] == []
    assert hypervisor.get_info(uuid).power_state == RUNNING


def test_a_guest_deleted_more_recently_than_the_timeout_is_left_for_now(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    recent = _deleted(db_url, hypervisor, deleted_s_ago=5)
    old = _deleted(db_url, hypervisor, deleted_s_ago=600)
    ctx = _ctx(
        db_url,
        hypervisor,
        running_deleted_instance_action="reap",
        running_deleted_instance_timeout=60,
    )
    assert power_sync.cleanup_running_deleted_instances(ctx)["instances"] == [old]
    assert hypervisor.instance_exists(recent) and not hypervisor.instance_exists(old)


def test_live_soft_deleted_and_rowless_guests_are_never_reaped(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    live = _server(db_url, "active")
    soft_deleted = _server(db_url, "soft-delete", SHUTDOWN, deleted_at=_ago(600))
    orphan = str(uuid_module.uuid4())  # a guest with no instance row: the audit's, not ours
    for uuid in (live, soft_deleted, orphan):
        _guest(hypervisor, uuid)
    ctx = _ctx(db_url, hypervisor, running_deleted_instance_action="reap")
    assert power_sync.cleanup_running_deleted_instances(ctx)["instances"] == []
    assert all(hypervisor.instance_exists(u) for u in (live, soft_deleted, orphan))


def test_a_reaped_guest_that_a_heal_counted_as_an_orphan_gives_its_usage_back(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = _deleted(db_url, hypervisor)
    # The start-up update_available_resource counts the deleted server's running guest.
    heals = update_available_resource(db_url, hypervisor, "host1", make_settings())
    assert [h["action"] for h in heals] == ["orphan_counted"]
    assert _memory_used(db_url) == 512 + 64
    ctx = _ctx(db_url, hypervisor, running_deleted_instance_action="reap")
    assert power_sync.cleanup_running_deleted_instances(ctx)["instances"] == [uuid]
    assert _memory_used(db_url) == 512  # now, not at the next pass
    with session_scope(db_url) as session:
        assert (
            session.scalars(select(Allocation).where(Allocation.consumer_uuid == uuid)).all() == []
        )
        [heal] = session.scalars(select(ResourceHeal).where(ResourceHeal.action == "removed"))
        assert (heal.consumer_uuid, heal.reason) == (uuid, "instance is deleted")
        view = {"domains": []}
        assert audit_nodes(session, {"host1": view})["leaks"] == 0


def test_releasing_an_orphan_count_leaves_a_live_guests_alone(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    live = _server(db_url, "active")
    _guest(hypervisor, live)
    update_available_resource(db_url, hypervisor, "host1", make_settings())
    used = _memory_used(db_url)
    with session_scope(db_url) as session:
        assert release_destroyed_orphan(session, "host1", live) == []
    assert _memory_used(db_url) == used


def _memory_used(db_url: str) -> int:
    with session_scope(db_url) as session:
        return session.scalars(select(ComputeNode.memory_mb_used)).one()
