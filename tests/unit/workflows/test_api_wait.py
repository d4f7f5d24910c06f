"""``wait`` ends when the operation ends (issue 15, defect 2): a move no host can take
ends the wait at once with its fault, not at the timeout, through the API and through
every command's ``--wait``; a status word that does not exist is refused, naming the ones
that do."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from compute.delete import mark_deleted
from compute.instance_state import get_instance
from models.db import session_scope
from novaq import fault_points
from novaq.cli import main
from novaq.exceptions import (
    FlavorExists,
    InvalidInput,
    NotFound,
    OperationFailed,
    WaitTimeout,
)
from novaq.settings import get_settings
from tasks import context
from tests.unit.workflows.servers import boot_active, delete_and_wait, placed_server
from workflows import api

#: Far longer than a failed move takes: a wait that runs into it has missed the end.
LONG_WAIT = 60.0
#: What "at once" means here (the in-thread worker needs a moment to schedule).
PROMPT = 15.0


def test_a_migrate_no_host_can_take_ends_the_wait_at_once_with_its_fault(
    db_url: str, worker: None
) -> None:
    uuid = boot_active()
    request_id = api.migrate(uuid)  # host1 is the only host: NoValidHost
    started = time.monotonic()
    with pytest.raises(OperationFailed, match="No valid host was found") as raised:
        api.wait(uuid, "VERIFY_RESIZE", timeout=LONG_WAIT, request_id=request_id)
    assert time.monotonic() - started < PROMPT
    assert raised.value.kwargs["status"] == "ACTIVE"
    assert raised.value.kwargs["action"] == "migrate"
    # The fault says why: the server's own host is not a destination (defect 4's report).
    assert "ignored hosts (host1) removed 1 host" in str(raised.value)
    assert "ComputeFilter: 0 -> 0" in api.show(uuid)["fault"]["details"]
    # Without the request id, the server's latest action is the one watched.
    started = time.monotonic()
    with pytest.raises(OperationFailed, match="No valid host was found"):
        api.wait(uuid, "VERIFY_RESIZE", timeout=LONG_WAIT)
    assert time.monotonic() - started < PROMPT
    delete_and_wait(uuid)


def test_commands_waiting_for_a_failed_move_end_at_once_with_the_fault(
    db_url: str, worker: None
) -> None:
    uuid = boot_active()
    with contextlib.suppress(FlavorExists):
        api.create_flavor("m2", 2, 512, 1)
    runner = CliRunner()
    for command in (["resize", uuid, "m2"], ["migrate", uuid]):
        started = time.monotonic()
        result = runner.invoke(main, [*command, "--wait", str(LONG_WAIT)])
        assert time.monotonic() - started < PROMPT, result.output
        assert result.exit_code == 1, result.output
        assert "OperationFailed" in result.output and "No valid host" in result.output
        assert "WaitTimeout" not in result.output
        assert api.show(uuid)["status"] == "ACTIVE"
    delete_and_wait(uuid)


def test_confirm_and_revert_take_wait(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    allowed = get_settings().model_copy(update={"allow_resize_to_same_host": True})
    monkeypatch.setattr(context, "settings", lambda: allowed)
    uuid = boot_active()
    for name, vcpus in (("m2", 2), ("m3", 3)):
        with contextlib.suppress(FlavorExists):
            api.create_flavor(name, vcpus, 512, 1)
    runner = CliRunner()
    steps = [
        (["resize", uuid, "m2", "--wait", "30"], "VERIFY_RESIZE", 2),
        (["resize-confirm", uuid, "--wait", "30"], "ACTIVE", 2),
        (["resize", uuid, "m3", "--wait", "30"], "VERIFY_RESIZE", 3),
        (["resize-revert", uuid, "--wait", "30"], "ACTIVE", 2),
    ]
    for command, status, vcpus in steps:
        result = runner.invoke(main, command)
        assert result.exit_code == 0, result.output
        view = api.show(uuid)
        # --wait returned only once the request ended: no task left, the status reached.
        assert (view["status"], view["task_state"], view["flavor"]["vcpus"]) == (
            status,
            None,
            vcpus,
        ), command
    result = runner.invoke(main, ["stop", uuid, "--wait", "30"])
    assert result.exit_code == 0 and api.show(uuid)["status"] == "SHUTOFF", result.output
    delete_and_wait(uuid)


def test_a_status_word_that_is_none_is_refused_naming_the_valid_ones(db_url: str) -> None:
    uuid = placed_server(db_url, "active")
    with pytest.raises(InvalidInput, match="RUNNING") as raised:
        api.wait(uuid, "RUNNING", timeout=1)
    assert "ACTIVE" in str(raised.value) and "SHUTOFF" in str(raised.value)
    result = CliRunner().invoke(main, ["migrate", uuid, "--wait", "-1"])
    assert result.exit_code == 2 and "-1" in result.output


def test_a_request_of_another_server_is_refused(db_url: str) -> None:
    uuid = placed_server(db_url, "active")
    with pytest.raises(NotFound, match="req-nope"):
        api.wait(uuid, "ACTIVE", timeout=1, request_id="req-nope")


def test_an_action_that_had_ended_well_before_the_wait_leaves_it_to_the_status(
    db_url: str, worker: None
) -> None:
    # The create ended long ago: the server may still change by itself (a guest that
    # shuts down, seen by the power sync), so the wait is for the status alone.
    uuid = boot_active()
    with pytest.raises(WaitTimeout):
        api.wait(uuid, "SHUTOFF", timeout=0.5)
    assert api.wait(uuid, "ACTIVE", timeout=0.5)["status"] == "ACTIVE"
    delete_and_wait(uuid)


def test_a_server_deleted_while_waited_for_ends_the_wait(db_url: str) -> None:
    # A stop accepted, then a delete took the server over: the stop step will be skipped.
    uuid = placed_server(db_url, "active", task_state="powering-off")
    with session_scope(db_url) as session:
        mark_deleted(get_instance(session, uuid))
    started = time.monotonic()
    with pytest.raises(OperationFailed, match="the server was deleted"):
        api.wait(uuid, "SHUTOFF", timeout=LONG_WAIT)
    assert time.monotonic() - started < PROMPT


def test_the_wait_command_refuses_a_status_that_is_none_and_waits_for_one(db_url: str) -> None:
    uuid = placed_server(db_url, "active")
    runner = CliRunner()
    refused = runner.invoke(main, ["wait", uuid, "RUNNING"])
    assert refused.exit_code == 1, refused.output
    assert "InvalidInput" in refused.output and "RUNNING" in refused.output
    assert "SHUTOFF" in refused.output
    done = runner.invoke(main, ["wait", uuid, "active", "--timeout", "1", "--json"])
    assert done.exit_code == 0, done.output
    assert '"status": "ACTIVE"' in done.output
    late = runner.invoke(main, ["wait", uuid, "SHUTOFF", "--timeout", "0.3"])
    assert late.exit_code == 1 and "WaitTimeout" in late.output


def test_wait_takes_a_name_and_refuses_a_bad_request_id(db_url: str) -> None:
    uuid = placed_server(db_url, "active", display_name="web")
    assert api.wait("web", "ACTIVE", timeout=1)["uuid"] == uuid
    with pytest.raises(InvalidInput, match="request_id"):
        api.wait(uuid, "ACTIVE", timeout=1, request_id="req\x00")
    with pytest.raises(InvalidInput, match="request_id"):
        api.wait(uuid, "ACTIVE", timeout=1, request_id=7)


def test_a_lifecycle_command_s_wait_ends_at_once_when_its_step_fails(
    db_url: str, worker: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pause step fails on the host; Nova keeps the server ACTIVE, with the fault.
    uuid = boot_active()
    monkeypatch.setenv(fault_points.ENV, str(tmp_path))
    fault_points.arm_raise(tmp_path, "pause:act")
    started = time.monotonic()
    result = CliRunner().invoke(main, ["pause", uuid, "--wait", str(LONG_WAIT)])
    assert time.monotonic() - started < PROMPT, result.output
    assert result.exit_code == 1, result.output
    assert "OperationFailed" in result.output and "fault injected at pause:act" in result.output
    assert api.show(uuid)["status"] == "ACTIVE"
    monkeypatch.delenv(fault_points.ENV)
    delete_and_wait(uuid)


def test_waiting_for_the_delete_of_an_errored_server_waits_for_the_delete(
    db_url: str, worker: None
) -> None:
    # ERROR with a task (deleting) is on its way: the wait is for DELETED, not the error.
    uuid = placed_server(db_url, "error")
    api.delete(uuid)
    assert api.wait(uuid, "DELETED", timeout=LONG_WAIT)["status"] == "DELETED"


def test_an_errored_server_at_rest_ends_a_wait_at_once(db_url: str) -> None:
    uuid = placed_server(db_url, "error")
    started = time.monotonic()
    with pytest.raises(OperationFailed, match="ERROR"):
        api.wait(uuid, "ACTIVE", timeout=LONG_WAIT)
    assert time.monotonic() - started < PROMPT
