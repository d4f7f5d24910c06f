"""``sync_power_states`` on servers booted through the API and a real in-thread worker
(libvirt test:///): the guest is changed behind novaq's back through the hypervisor
itself, the pass is called as the periodic task calls it, and the stop it asks of the
API runs through the worker."""

from __future__ import annotations

import time
from typing import Any

from compute.periodic.power_sync import sync_power_states
from tasks import context
from tasks.periodic import run_pass
from tests.unit.workflows.servers import boot_active, delete_and_wait, periodic_context
from virt import power_state
from workflows import api


def _settled(uuid: str, status: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The server once it shows ``status`` with no task in flight."""
    deadline = time.monotonic() + timeout_s
    while (view := api.show(uuid))["status"] != status or view["task_state"] is not None:
        assert time.monotonic() < deadline, view
        time.sleep(0.1)
    return view


def _stops(uuid: str) -> list[list[tuple[str, str]]]:
    return [
        [(e["event"], e["result"]) for e in a["events"]]
        for a in api.list_actions(uuid)
        if a["action"] == "stop"
    ]


def test_a_domain_stopped_behind_novaqs_back_turns_the_server_shutoff(
    db_url: str, worker: None
) -> None:
    uuid = boot_active()
    context.driver().power_off(uuid)  # the guest shuts down by itself
    summary = run_pass(sync_power_states, periodic_context(db_url))
    assert summary["stop"] == [uuid] and summary["power_state_updated"] == [uuid]
    view = _settled(uuid, "SHUTOFF")
    assert view["vm_state"] == "stopped"
    assert context.driver().get_info(uuid).power_state == power_state.SHUTDOWN
    assert _stops(uuid) == [[("compute_stop_instance", "Success")]]  # as Nova's API stop
    assert run_pass(sync_power_states, periodic_context(db_url))["in_sync"] == [
        uuid
    ]  # nothing left to do
    delete_and_wait(uuid)


def test_a_guest_started_under_a_stopped_server_is_force_stopped(db_url: str, worker: None) -> None:
    uuid = boot_active()
    api.stop(uuid)
    _settled(uuid, "SHUTOFF")
    context.driver().power_on(uuid)  # started behind novaq's back
    summary = run_pass(sync_power_states, periodic_context(db_url))
    assert summary["force_stop"] == [uuid]
    deadline = time.monotonic() + 30
    while context.driver().get_info(uuid).power_state != power_state.SHUTDOWN:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert _settled(uuid, "SHUTOFF")["vm_state"] == "stopped"
    assert len(_stops(uuid)) == 2  # the user's stop, then the sync's force_stop
    delete_and_wait(uuid)


def test_a_paused_server_whose_guest_shut_down_is_force_stopped_to_shutoff(
    db_url: str, worker: None
) -> None:
    uuid = boot_active()
    api.pause(uuid)
    _settled(uuid, "PAUSED")
    context.driver().power_off(uuid)
    assert run_pass(sync_power_states, periodic_context(db_url))["force_stop"] == [uuid]
    assert _settled(uuid, "SHUTOFF")["vm_state"] == "stopped"
    delete_and_wait(uuid)


def test_a_locked_server_is_not_stopped_and_is_tried_again_next_pass(
    db_url: str, worker: None
) -> None:
    uuid = boot_active()
    api.lock(uuid)
    context.driver().power_off(uuid)
    assert run_pass(sync_power_states, periodic_context(db_url))["failed"] == [
        uuid
    ]  # Nova's stop checks the lock
    assert api.show(uuid)["status"] == "ACTIVE"
    api.unlock(uuid)
    assert run_pass(sync_power_states, periodic_context(db_url))["stop"] == [uuid]
    _settled(uuid, "SHUTOFF")
    delete_and_wait(uuid)
