"""``compute.periodic.power_sync`` on real state: SQLite rows and a fresh libvirt
``test:///`` node per test. The stops it asks of the API are sent (``tasks.periodic.run_pass``) to
``StopRecorder`` here (the API's own path is tested through a worker in
``tests/unit/workflows/test_periodic_power_sync.py``)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from compute.instance_state import cas_update, get_instance
from compute.periodic import power_sync
from compute.periodic.power_sync import decide
from compute.sessions import sessions_for
from models import utcnow
from models.db import session_scope
from novaq.exceptions import InstanceInvalidState
from tasks.periodic import run_pass
from tests.unit.compute.periodic.servers import host1_server, periodic_ctx, spawn_guest
from virt import power_state
from virt.driver import GuestInfo
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


def _power(db_url: str, uuid: str) -> int:
    with session_scope(db_url) as session:
        return get_instance(session, uuid).power_state


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
    uuid = host1_server(db_url, "active")
    spawn_guest(hypervisor, uuid, SHUTDOWN)  # powered off behind novaq's back
    api = StopRecorder()
    summary = run_pass(power_sync.sync_power_states, periodic_ctx(db_url, hypervisor), api)
    assert api.calls == [("stop", uuid)]
    assert summary["stop"] == [uuid] and summary["power_state_updated"] == [uuid]
    assert _power(db_url, uuid) == SHUTDOWN


@pytest.mark.parametrize(("vm_state", "guest"), [("stopped", RUNNING), ("paused", SHUTDOWN)])
def test_a_guest_out_of_step_with_a_stopped_or_paused_server_is_force_stopped(
    db_url: str, hypervisor: LibvirtDriver, vm_state: str, guest: int
) -> None:
    db_power = SHUTDOWN if vm_state == "stopped" else PAUSED
    uuid = host1_server(db_url, vm_state, db_power)
    spawn_guest(hypervisor, uuid, guest)
    api = StopRecorder()
    summary = run_pass(power_sync.sync_power_states, periodic_ctx(db_url, hypervisor), api)
    assert api.calls == [("force_stop", uuid)]
    assert summary["force_stop"] == [uuid]
    assert _power(db_url, uuid) == guest


def test_unexpected_pause_missing_guest_and_running_soft_deleted_are_only_logged(
    db_url: str, hypervisor: LibvirtDriver, caplog: pytest.LogCaptureFixture
) -> None:
    paused = host1_server(db_url, "active")
    spawn_guest(hypervisor, paused, PAUSED)
    missing = host1_server(db_url, "active")  # no guest at all
    soft_deleted = host1_server(db_url, "soft-delete", SHUTDOWN, deleted_at=utcnow())
    spawn_guest(hypervisor, soft_deleted)
    api = StopRecorder()
    with caplog.at_level(logging.WARNING, logger=power_sync.__name__):
        summary = run_pass(power_sync.sync_power_states, periodic_ctx(db_url, hypervisor), api)
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
    uuid = host1_server(db_url, vm_state, RUNNING)
    spawn_guest(hypervisor, uuid, SHUTDOWN)
    api = StopRecorder()
    summary = run_pass(power_sync.sync_power_states, periodic_ctx(db_url, hypervisor), api)
    assert api.calls == [] and summary["in_sync"] == [uuid]
    assert _power(db_url, uuid) == SHUTDOWN


def test_a_server_with_a_task_in_flight_is_left_alone(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = host1_server(db_url, "active", task_state="powering-off")
    spawn_guest(hypervisor, uuid, SHUTDOWN)
    api = StopRecorder()
    summary = run_pass(power_sync.sync_power_states, periodic_ctx(db_url, hypervisor), api)
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
    uuid = host1_server(db_url, "stopped", SHUTDOWN)
    spawn_guest(driver, uuid, RUNNING)
    api = StopRecorder()
    try:
        summary = run_pass(power_sync.sync_power_states, periodic_ctx(db_url, driver), api)
    finally:
        driver.close()
    assert summary["pending_task"] == [uuid] and api.calls == []
    assert _power(db_url, uuid) == SHUTDOWN  # not written under the request


def test_a_refused_stop_is_counted_and_the_other_servers_are_still_synced(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    refused = host1_server(db_url, "active")
    spawn_guest(hypervisor, refused, SHUTDOWN)
    fine = host1_server(db_url, "active", NOSTATE)
    spawn_guest(hypervisor, fine, RUNNING)
    summary = run_pass(
        power_sync.sync_power_states, periodic_ctx(db_url, hypervisor), StopRecorder(refuse=True)
    )
    assert summary["failed"] == [refused]
    assert summary["in_sync"] == [fine] and _power(db_url, fine) == RUNNING


def test_only_this_hosts_live_instances_are_synced_and_a_count_mismatch_is_warned(
    db_url: str, hypervisor: LibvirtDriver, caplog: pytest.LogCaptureFixture
) -> None:
    mine = host1_server(db_url, "active")
    spawn_guest(hypervisor, mine)
    elsewhere = host1_server(db_url, "active", SHUTDOWN, host="host2", node="host2")
    deleted = host1_server(db_url, "deleted", NOSTATE, deleted=1, deleted_at=utcnow())
    spawn_guest(hypervisor, deleted)  # a second guest: 2 on the hypervisor, 1 in the database
    with caplog.at_level(logging.WARNING, logger=power_sync.__name__):
        summary = run_pass(
            power_sync.sync_power_states, periodic_ctx(db_url, hypervisor), StopRecorder()
        )
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
        uuid = host1_server(db_url, "resized", NOSTATE)  # ignored vm_state: only the write
        spawn_guest(hypervisor, uuid, power)
        uuids.append(uuid)
    summary = run_pass(
        power_sync.sync_power_states,
        periodic_ctx(db_url, hypervisor, sync_power_state_pool_size=5),
        StopRecorder(),
    )
    assert sorted(summary["power_state_updated"]) == sorted(uuids)
    assert [_power(db_url, uuid) for uuid in uuids] == states


class CountingSessions:
    """Production's transactions, each counted as a reader's or a writer's."""

    def __init__(self, db_url: str) -> None:
        self.inner = sessions_for(db_url)
        self.readers = self.writers = 0

    def __call__(self, read_only: bool = False) -> AbstractContextManager[Session]:
        if read_only:
            self.readers += 1
        else:
            self.writers += 1
        return self.inner(read_only=read_only)


def test_a_server_in_step_costs_one_readers_transaction_and_a_change_is_still_written(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    in_step = host1_server(db_url, "active")
    spawn_guest(hypervisor, in_step)
    counting = CountingSessions(db_url)
    ctx = dataclasses.replace(periodic_ctx(db_url, hypervisor), sessions=counting)
    assert power_sync.sync_instance(ctx, in_step) == "in_sync"
    assert (counting.readers, counting.writers) == (1, 0)  # no write lock taken

    hypervisor.power_off(in_step)  # then the guest goes down behind novaq's back
    assert power_sync.sync_instance(ctx, in_step) == "stop"
    assert _power(db_url, in_step) == SHUTDOWN
    assert (counting.readers, counting.writers) == (2, 1)
