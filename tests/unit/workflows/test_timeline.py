"""``api.timeline`` and ``novaq timeline`` (issue 15, ★): a server's whole workflow, through
a real in-thread worker: every step with its own task id (the scheduler step is no
longer hidden behind the build by ``Task.replace``), its queue, worker, outcome and
state transitions, grouped by operation in time order; bad input refused."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from models import StepRecord
from models.db import session_scope
from novaq.cli import base, main
from novaq.exceptions import InstanceNotFound, InvalidInput
from tasks import app
from tests.timelines import settled_timeline
from tests.unit.workflows.servers import boot_active, delete_and_wait, placed_server
from workflows import api
from workflows.canvas import step


@pytest.fixture
def stopped_then_deleted(db_url: str, worker: None) -> Iterator[str]:
    """A server booted, stopped and deleted through the worker."""
    uuid = boot_active("tl")
    api.stop(uuid)
    api.wait(uuid, "SHUTOFF", timeout=30)
    delete_and_wait(uuid)
    yield uuid


def _ops(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["action"]: op for op in data["operations"]}


def test_the_timeline_shows_every_step_of_boot_stop_and_delete_in_order(
    stopped_then_deleted: str,
) -> None:
    data = settled_timeline(stopped_then_deleted)
    assert [op["action"] for op in data["operations"]] == ["create", "stop", "delete"]
    create = _ops(data)["create"]
    select_step, build = create["steps"]
    assert select_step["task"] == "scheduler.select_destinations"
    assert select_step["queue"] == "scheduler"
    assert build["task"] == "compute.build_and_run_instance"
    assert build["queue"] == "compute.host1" and build["host"] == "host1"
    # Two tasks, linked: the build was sent by the scheduler step.
    assert select_step["task_id"] != build["task_id"]
    assert build["parent_id"] == select_step["task_id"]
    assert select_step["outcome"] == build["outcome"] == "success"
    assert select_step["detail"] == f"handed over to {build['task_id']}"
    assert build["transitions"] == {
        "vm_state": ["building", "active"],
        "task_state": ["scheduling", None],
        "power_state": ["NOSTATE", "RUNNING"],
    }
    assert select_step["started_at"] <= build["started_at"] <= build["ended_at"]
    assert all(s["deliveries"] == 1 and s["worker"] for s in create["steps"])
    [stop] = _ops(data)["stop"]["steps"]
    assert stop["task"] == "compute.stop_instance"
    assert stop["transitions"]["vm_state"] == ["active", "stopped"]
    assert stop["transitions"]["task_state"] == ["powering-off", None]
    assert stop["transitions"]["power_state"] == ["RUNNING", "SHUTDOWN"]
    [delete] = _ops(data)["delete"]["steps"]
    assert delete["transitions"]["vm_state"][1] == "deleted"
    assert data["server"]["deleted"] is True
    assert all(op["result"] == "Success" for op in data["operations"])
    assert any(e["host"] == "host1" for e in create["events"])


def test_the_scheduler_step_succeeds_in_celery_naming_the_build(stopped_then_deleted: str) -> None:
    """Flower shows the scheduler step as a task of its own that succeeded."""
    create = _ops(settled_timeline(stopped_then_deleted))["create"]
    select_step, build = create["steps"]
    result = app.AsyncResult(select_step["task_id"])
    assert result.state == "SUCCESS"
    assert result.result == {
        "replaced_by": [build["task_id"]],
        "task": "compute.build_and_run_instance",
    }


def test_the_command_prints_the_tree_and_the_json(
    stopped_then_deleted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.console, "width", 400)
    runner = CliRunner()
    tree = runner.invoke(main, ["timeline", stopped_then_deleted])
    assert tree.exit_code == 0, tree.output
    data = settled_timeline(stopped_then_deleted)
    for record in (s for op in data["operations"] for s in op["steps"]):
        assert record["task"] in tree.output and record["task_id"] in tree.output
    assert "queue compute.host1" in tree.output and "queue scheduler" in tree.output
    assert "vm_state active -> stopped" in tree.output
    as_json = runner.invoke(main, ["timeline", "--json", stopped_then_deleted])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output) == data


def _records(db_url: str) -> int:
    with session_scope(db_url) as session:
        return int(session.scalar(select(func.count()).select_from(StepRecord)) or 0)


def test_an_unknown_server_is_refused(db_url: str) -> None:
    with pytest.raises(InstanceNotFound):
        api.timeline("no-such-server")
    with pytest.raises(InstanceNotFound):
        api.timeline("6f1c1a8e-2d3b-4c5d-9e8f-000000000000")
    result = CliRunner().invoke(main, ["timeline", "no-such-server"])
    assert result.exit_code == 1
    assert "ERROR (InstanceNotFound)" in result.output
    assert _records(db_url) == 0


def test_an_ambiguous_name_is_refused(db_url: str) -> None:
    placed_server(db_url, display_name="twin")
    placed_server(db_url, display_name="twin")
    with pytest.raises(InvalidInput, match="2 servers are named 'twin'"):
        api.timeline("twin")
    result = CliRunner().invoke(main, ["timeline", "twin"])
    assert result.exit_code == 1 and "ERROR (AmbiguousServerName)" in result.output
    with pytest.raises(InvalidInput):
        api.timeline("")
    with pytest.raises(InvalidInput):
        api.timeline(42)  # type: ignore[arg-type]


def test_a_server_with_no_step_recorded_has_its_action_only(db_url: str) -> None:
    """A server written by hand (no worker ran): its create action, no step."""
    uuid = placed_server(db_url, display_name="quiet")
    data = api.timeline("quiet")
    assert data["server"]["uuid"] == uuid
    [create] = data["operations"]
    assert create["action"] == "create" and create["steps"] == []


def test_a_boot_no_host_fits_shows_the_failed_scheduler_step_and_its_fault(
    db_url: str, worker: None
) -> None:
    api.create_flavor("huge", 1, 10**6, 10)
    [uuid] = api.boot("big", "huge", "cirros")
    api.wait(uuid, "ERROR", timeout=30)
    [create] = settled_timeline(uuid)["operations"]
    [select_step] = create["steps"]
    assert select_step["task"] == "scheduler.select_destinations"
    assert select_step["outcome"] == "failure"
    assert select_step["detail"].startswith("NoValidHost: No valid host was found.")
    assert select_step["transitions"]["vm_state"] == ["building", "error"]
    [fault] = create["faults"]
    assert fault["message"].startswith("No valid host was found.")
    assert create["result"] == "Error"


def test_a_step_that_expired_before_it_ran_is_recorded_revoked(db_url: str, worker: None) -> None:
    """Celery drops an expired message without running it (no after_return): the
    revocation is recorded all the same."""
    uuid = placed_server(db_url, display_name="late")
    expired = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    message = step("compute.stop_instance", instance_uuid=uuid, request_id="req-late", host="host1")
    result = message.apply_async(expires=expired)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        steps = [s for op in api.timeline(uuid)["operations"] for s in op["steps"]]
        if steps:
            break
        time.sleep(0.1)
    [late] = steps
    assert (late["task"], late["task_id"]) == ("compute.stop_instance", result.id)
    assert late["outcome"] == "revoked" and late["detail"] == "expired"
    assert late["transitions"]["vm_state"] == ["active", "active"]


@app.task(bind=True, name="tests.timeline.retried_once", max_retries=1)
def retried_once(self: Any, instance_uuid: str, request_id: str, countdown_s: float) -> Any:
    """A test-only step that asks Celery for one retry, then succeeds."""
    if self.request.retries == 0:
        raise self.retry(countdown=countdown_s)
    return {"instance_uuid": instance_uuid, "outcome": "done"}


def test_a_retried_step_shows_retried_then_its_second_delivery(db_url: str, worker: None) -> None:
    uuid = placed_server(db_url, display_name="retry")
    sent = retried_once.apply_async(
        kwargs={"instance_uuid": uuid, "request_id": "req-retry", "countdown_s": 2.0},
        queue="compute.host1",
    )
    seen: set[str] = set()
    deadline = time.monotonic() + 20
    record: dict[str, Any] = {}
    while time.monotonic() < deadline and record.get("outcome") != "success":
        steps = [s for op in api.timeline(uuid)["operations"] for s in op["steps"]]
        record = steps[0] if steps else {}
        seen.add(str(record.get("outcome")))
        time.sleep(0.05)
    assert "retried" in seen, seen
    assert (record["task_id"], record["outcome"], record["detail"]) == (sent.id, "success", "done")
    assert record["deliveries"] == 2 and len(record["delivery_log"]) == 2
