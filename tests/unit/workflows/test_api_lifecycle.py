"""The lifecycle API: Nova's gate (state, lock, host) refusing before anything is written
or enqueued, and every operation through a real in-thread worker on libvirt test:///."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from lxml import etree
from sqlalchemy import select

from compute.instance_state import get_instance
from models import Service
from models.db import session_scope
from novaq.cli import main
from novaq.exceptions import (
    ImageNotActive,
    ImageNotFound,
    InstanceInvalidState,
    InvalidInput,
    ServiceUnavailable,
)
from tasks import app
from tests.factories import write_raw_image
from tests.unit.workflows.servers import action_count, clear_queues, placed_server, queued
from virt.libvirt.imagecache import cache_file_name
from workflows import api, gate
from workflows.gate import GATE, InstanceHostDown, InstanceIsLocked, InstanceNotReady

QUEUE = "compute.host1"


@pytest.fixture
def empty_queue() -> Iterator[None]:
    """Leave no message behind for a later test's worker."""
    yield
    clear_queues(QUEUE)


# -- the gate as data ----------------------------------------------------------------------

ALL_ACTIONS = {
    "stop",
    "start",
    "reboot",
    "reboot_hard",
    "pause",
    "unpause",
    "suspend",
    "resume",
    "rescue",
    "unrescue",
    "trigger_crash_dump",
    "resize",
    "confirm_resize",
    "revert_resize",
    "migrate",
    "shelve",
    "shelve_offload",
    "unshelve",
    "delete",
    "restore",
    "lock",
    "unlock",
    "update_metadata",
}


def test_the_gate_names_every_action_and_defaults_to_no_task_in_flight() -> None:
    assert set(GATE) == ALL_ACTIONS
    for action, rule in GATE.items():
        if action not in ("reboot_hard", "delete", "lock", "unlock"):
            assert rule.task_states == frozenset({None}), action
            assert rule.must_have_launched, action
    assert GATE["delete"].vm_states is None and GATE["delete"].task_states is None
    assert not GATE["delete"].must_have_launched
    assert "pausing" in GATE["reboot_hard"].task_states  # type: ignore[operator]


@pytest.mark.parametrize(
    ("action", "vm_state", "allowed"),
    [
        ("stop", "active", True),
        ("stop", "error", True),
        ("stop", "paused", False),
        ("stop", "stopped", False),
        ("start", "active", False),
        ("reboot", "stopped", False),
        ("reboot_hard", "suspended", True),
        ("unpause", "active", False),
        ("resume", "active", False),
        ("rescue", "error", True),
        ("resize", "paused", False),
        ("shelve", "suspended", True),
        ("unshelve", "shelved_offloaded", True),
        ("confirm_resize", "active", False),
        ("restore", "soft-delete", True),
        ("delete", "building", True),
    ],
)
def test_check_instance_state_follows_novas_table(
    db_url: str, action: str, vm_state: str, allowed: bool
) -> None:
    uuid = placed_server(db_url, vm_state)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        if allowed:
            gate.check_instance_state(instance, action)
        else:
            with pytest.raises(InstanceInvalidState, match=f"vm_state {vm_state}"):
                gate.check_instance_state(instance, action)


def test_a_never_launched_instance_cannot_be_stopped_but_can_be_deleted(db_url: str) -> None:
    uuid = placed_server(db_url, "error", launched_at=None)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        with pytest.raises(InstanceInvalidState, match="never been launched"):
            gate.check_instance_state(instance, "stop")
        gate.check_instance_state(instance, "delete")


# -- refusals: nothing written, nothing enqueued --------------------------------------------


REFUSED = [
    (api.start, "active"),
    (api.unpause, "active"),
    (api.resume, "active"),
    (api.unrescue, "active"),
    (api.stop, "paused"),
    (api.stop, "stopped"),
    (api.pause, "paused"),
    (api.suspend, "paused"),
    (api.reboot, "stopped"),
    (api.rescue, "paused"),
]


@pytest.mark.parametrize(("call", "vm_state"), REFUSED)
def test_an_operation_in_a_state_nova_forbids_is_refused_before_anything_happens(
    db_url: str, call: Any, vm_state: str
) -> None:
    uuid = placed_server(db_url, vm_state)
    before = (queued(QUEUE), action_count(db_url))
    with pytest.raises(InstanceInvalidState, match=f"vm_state {vm_state}, task_state None"):
        call(uuid)
    assert (queued(QUEUE), action_count(db_url)) == before
    assert api.show(uuid)["task_state"] is None


def test_an_operation_while_another_is_in_flight_is_refused(db_url: str) -> None:
    uuid = placed_server(db_url, "active", task_state="pausing")
    with pytest.raises(InstanceInvalidState, match="task_state pausing"):
        api.stop(uuid)
    with pytest.raises(InstanceInvalidState):
        api.reboot(uuid)


@pytest.mark.parametrize("vm_state", ["active", "stopped", "paused", "suspended", "error"])
def test_a_hard_reboot_is_accepted_where_nova_accepts_it(
    db_url: str, empty_queue: None, vm_state: str
) -> None:
    uuid = placed_server(db_url, vm_state, task_state="pausing" if vm_state == "active" else None)
    before = queued(QUEUE)
    request_id = api.reboot(uuid, hard=True)
    assert queued(QUEUE) == before + 1
    view = api.show(uuid)
    assert (view["task_state"], view["vm_state"]) == ("rebooting_hard", vm_state)
    [*_, action] = api.list_actions(uuid)
    assert (action["action"], action["request_id"]) == ("reboot", request_id)


def test_an_accepted_request_sets_the_task_state_and_starts_the_action(
    db_url: str, empty_queue: None
) -> None:
    uuid = placed_server(db_url, "active")
    request_id = api.stop(uuid)
    assert request_id.startswith("req-")
    view = api.show(uuid)
    assert (view["status"], view["task_state"]) == ("ACTIVE", "powering-off")
    assert api.list_actions(uuid)[-1]["action"] == "stop"
    with pytest.raises(InstanceInvalidState, match="powering-off"):
        api.stop(uuid)
    assert queued(QUEUE) == 1


def test_a_locked_server_refuses_every_operation_until_unlocked(
    db_url: str, empty_queue: None
) -> None:
    uuid = placed_server(db_url, "active")
    view = api.lock(uuid, reason="maintenance")
    assert (view["locked"], view["locked_reason"]) == (True, "maintenance")
    before = (queued(QUEUE), action_count(db_url))
    for call in (api.stop, api.pause, api.suspend, api.rescue, api.reboot):
        with pytest.raises(InstanceIsLocked, match=r"is locked \(maintenance\)"):
            call(uuid)
    with pytest.raises(InstanceIsLocked):
        api.reboot(uuid, hard=True)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        for action in ("resize", "migrate", "shelve", "delete"):
            with pytest.raises(InstanceIsLocked):
                gate.check_instance_state(instance, action)
    assert (queued(QUEUE), action_count(db_url)) == before
    assert api.lock(uuid)["locked_reason"] == "maintenance"  # already locked: no change
    assert action_count(db_url) == before[1]
    view = api.unlock(uuid)
    assert (view["locked"], view["locked_reason"]) == (False, None)
    api.stop(uuid)
    actions = api.list_actions(uuid)
    assert [a["action"] for a in actions] == ["create", "lock", "unlock", "stop"]
    assert actions[1]["events"][0]["event"] == "api_lock"
    assert actions[2]["events"][0]["result"] == "Success"


def test_a_lock_reason_must_be_a_short_string(db_url: str) -> None:
    uuid = placed_server(db_url, "active")
    with pytest.raises(InvalidInput):
        api.lock(uuid, reason="x" * 256)
    assert api.show(uuid)["locked"] is False


def test_a_server_whose_host_is_down_is_refused(db_url: str) -> None:
    uuid = placed_server(db_url, "active")
    with session_scope(db_url) as session:
        for service in session.scalars(select(Service).where(Service.host == "host1")):
            service.forced_down = True
    before = (queued(QUEUE), action_count(db_url))
    with pytest.raises(InstanceHostDown, match="compute service of its host host1 is down"):
        api.stop(uuid)
    assert (queued(QUEUE), action_count(db_url)) == before
    assert api.show(uuid)["task_state"] is None


def test_a_server_without_a_host_is_not_ready(db_url: str) -> None:
    uuid = placed_server(db_url, "error", host=None, node=None)
    with pytest.raises(InstanceNotReady):
        api.stop(uuid)


def test_the_broker_down_changes_nothing(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    uuid = placed_server(db_url, "active")
    before = action_count(db_url)
    monkeypatch.setitem(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.setitem(app.conf, "broker_write_url", "redis://127.0.0.1:1/0")
    with pytest.raises(ServiceUnavailable, match="message broker"):
        api.stop(uuid)
    assert api.show(uuid)["task_state"] is None
    assert action_count(db_url) == before


def test_deleted_and_unknown_servers_are_not_found(db_url: str) -> None:
    from novaq.exceptions import InstanceNotFound

    missing = "00000000-0000-0000-0000-000000000000"
    for call in (api.stop, api.start, api.reboot, api.lock, api.unlock, api.rescue):
        with pytest.raises(InstanceNotFound):
            call(missing)


# -- through a worker ------------------------------------------------------------------------


def _settled(uuid: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (view := api.show(uuid))["task_state"] is not None:
        assert time.monotonic() < deadline, view
        time.sleep(0.1)
    return view


@pytest.fixture
def booted(db_url: str, worker: None) -> Iterator[str]:
    """An ACTIVE server on host1, deleted afterwards: the simulated host's guests outlive
    the test database, and the next test's instance-00000001 must be free."""
    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("vm", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    yield uuid
    _settled(uuid)
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


STEPS = [
    # call, status once done, vm_state, power state in the DB and in libvirt
    (api.stop, "SHUTOFF", "stopped", 4),
    (api.start, "ACTIVE", "active", 1),
    (api.reboot, "ACTIVE", "active", 1),
    (lambda uuid: api.reboot(uuid, hard=True), "ACTIVE", "active", 1),
    (api.pause, "PAUSED", "paused", 3),
    (api.unpause, "ACTIVE", "active", 1),
    (api.suspend, "SUSPENDED", "suspended", 4),
    (api.resume, "ACTIVE", "active", 1),
    # A rescued guest runs its rescue domain (disk.rescue first), from ACTIVE or SHUTOFF.
    (api.rescue, "RESCUE", "rescued", 1),
    (api.unrescue, "ACTIVE", "active", 1),
    (api.stop, "SHUTOFF", "stopped", 4),
    (api.rescue, "RESCUE", "rescued", 1),
    (api.unrescue, "ACTIVE", "active", 1),
]


def test_every_operation_through_a_worker_moves_the_guest_in_libvirt(booted: str) -> None:
    uuid = booted
    for call, status, vm_state, power in STEPS:
        request_id = call(uuid)
        view = api.wait(uuid, status, timeout=30)
        assert (view["vm_state"], view["task_state"], view["power_state"]) == (
            vm_state,
            None,
            power,
        ), call
        diagnostics = api.diagnostics(uuid)
        assert diagnostics["power_state"] == power
        assert ("disk.rescue" in diagnostics["xml"]) == (vm_state == "rescued")
        action = api.list_actions(uuid)[-1]
        assert action["request_id"] == request_id and action["finish_time"] is not None
        [event] = action["events"]
        assert event["result"] == "Success" and event["host"] == "host1"
    names = [a["action"] for a in api.list_actions(uuid)]
    assert names == ["create"] + [
        "stop",
        "start",
        "reboot",
        "reboot",
        "pause",
        "unpause",
        "suspend",
        "resume",
        "rescue",
        "unrescue",
        "stop",
        "rescue",
        "unrescue",
    ]
    events = [a["events"][0]["event"] for a in api.list_actions(uuid)[1:]]
    assert events[:3] == [
        "compute_stop_instance",
        "compute_start_instance",
        "compute_reboot_instance",
    ]
    assert events[8] == "compute_rescue_instance"
    assert api.show(uuid)["fault"] is None


def test_a_pause_the_hypervisor_refuses_leaves_the_server_as_it_was_with_a_fault(
    booted: str,
) -> None:
    from tasks import context

    uuid = booted
    context.driver().power_off(uuid)  # behind novaq's back: the guest is off, the DB says active
    api.pause(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=30)
    assert (view["vm_state"], view["task_state"]) == ("active", None)
    assert "cannot pause guest" in view["fault"]["message"]
    [*_, action] = api.list_actions(uuid)
    assert action["events"][0]["event"] == "compute_pause_instance"
    assert action["events"][0]["result"] == "Error" and "Traceback" in (
        action["events"][0]["traceback"] or ""
    )
    assert action["message"] == "Error"


def test_a_suspend_the_hypervisor_refuses_puts_the_server_in_error(booted: str) -> None:
    from tasks import context

    uuid = booted
    context.driver().power_off(uuid)
    api.suspend(uuid)
    view = api.wait(uuid, "ERROR", timeout=30)
    assert view["task_state"] is None and "cannot suspend guest" in view["fault"]["message"]
    # From ERROR, Nova allows stop, hard reboot and rescue.
    api.reboot(uuid, hard=True)
    view = _settled(uuid)  # api.wait would stop at the ERROR status shown while rebooting
    assert (view["vm_state"], view["power_state"]) == ("active", 1)
    assert api.diagnostics(uuid)["power_state"] == 1


def test_rescue_with_an_image_boots_that_image_and_unrescue_restores_the_root_disk(
    booted: str, tmp_path: Path
) -> None:
    rescue = api.create_image(
        "rescue-kit", path=str(write_raw_image(tmp_path / "kit")), disk_format="raw"
    )
    api.rescue(booted, rescue_image_ref="rescue-kit")
    api.wait(booted, "RESCUE", timeout=30)
    xml = api.diagnostics(booted)["xml"]
    # The rescue disk is an overlay of the rescue image's base; the root disk comes second.
    base = cache_file_name(rescue["id"])
    [rescue_disk] = [d for d in _disks(xml) if d.endswith("/disk.rescue")]
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", rescue_disk],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert Path(info["backing-filename"]).name == base
    assert [Path(d).name for d in _disks(xml)] == ["disk.rescue", "disk"]
    api.unrescue(booted)
    api.wait(booted, "ACTIVE", timeout=30)
    assert [Path(d).name for d in _disks(api.diagnostics(booted)["xml"])] == ["disk"]


def test_rescue_with_an_unknown_or_inactive_image_is_refused_before_anything_is_written(
    db_url: str, empty_queue: None
) -> None:
    uuid = placed_server(db_url)
    actions_before, before = action_count(db_url), queued(QUEUE)
    with pytest.raises(ImageNotFound):
        api.rescue(uuid, rescue_image_ref="no-such-image")
    image = api.show_image("cirros")
    api.delete_image(image["id"])
    with pytest.raises(ImageNotActive):
        api.rescue(uuid, rescue_image_ref=image["id"])
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).task_state is None
    assert action_count(db_url) == actions_before
    assert queued(QUEUE) == before


def _disks(xml: str) -> list[str]:
    """The source files of the domain's disks, in device order."""
    return [
        str(s) for s in etree.fromstring(xml.encode()).xpath("/domain/devices/disk/source/@file")
    ]


def test_rescue_command_passes_the_image_and_refuses_an_unknown_one(
    db_url: str, empty_queue: None
) -> None:
    uuid = placed_server(db_url)
    runner = CliRunner()
    refused = runner.invoke(main, ["rescue", uuid, "--image", "no-such-image"])
    assert refused.exit_code != 0 and "no-such-image could not be found" in refused.output
    assert api.show(uuid)["task_state"] is None
    accepted = runner.invoke(main, ["rescue", uuid, "--image", "cirros"])
    assert accepted.exit_code == 0, accepted.output
    assert f"Request to rescue server {uuid} has been accepted" in accepted.output
    assert api.show(uuid)["task_state"] == "rescuing"
