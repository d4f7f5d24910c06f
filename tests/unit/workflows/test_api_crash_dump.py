"""``api.trigger_crash_dump`` and ``novaq trigger-crash-dump``: Nova's gate (ACTIVE, PAUSED,
RESCUE, VERIFY_RESIZE or ERROR, no task in flight, not locked, on a host) refusing before
anything is written or sent, and the NMI through a real in-thread worker on libvirt's
test:/// driver, the server's state untouched."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from novaq.cli import main
from novaq.exceptions import InstanceInvalidState
from tasks import context
from tests.unit.workflows.servers import (
    action_count,
    clear_queues,
    delete_and_wait,
    placed_server,
    queued,
)
from workflows import api
from workflows.gate import InstanceIsLocked, InstanceNotReady

QUEUE = "compute.host1"


@pytest.fixture
def empty_queue() -> Iterator[None]:
    yield
    clear_queues(QUEUE)


@pytest.mark.parametrize("vm_state", ["active", "paused", "rescued", "resized", "error"])
def test_it_is_accepted_where_nova_accepts_it_and_changes_no_state(
    db_url: str, empty_queue: None, vm_state: str
) -> None:
    uuid = placed_server(db_url, vm_state)
    request_id = api.trigger_crash_dump(uuid)
    assert queued(QUEUE) == 1
    view = api.show(uuid)
    assert (view["vm_state"], view["task_state"]) == (vm_state, None)
    [*_, action] = api.list_actions(uuid)
    assert (action["action"], action["request_id"]) == ("trigger_crash_dump", request_id)


@pytest.mark.parametrize(
    ("state", "refusal"),
    [
        ({"vm_state": "stopped"}, InstanceInvalidState),
        ({"vm_state": "suspended"}, InstanceInvalidState),
        ({"vm_state": "active", "task_state": "pausing"}, InstanceInvalidState),
        ({"vm_state": "active", "host": None}, InstanceNotReady),
        ({"vm_state": "active", "system_metadata": {"locked": "True"}}, InstanceIsLocked),
    ],
)
def test_it_is_refused_where_nova_refuses_it_before_anything_happens(
    db_url: str, state: dict[str, Any], refusal: type[Exception]
) -> None:
    uuid = placed_server(db_url, **state)
    before = (queued(QUEUE), action_count(db_url))
    with pytest.raises(refusal):
        api.trigger_crash_dump(uuid)
    assert (queued(QUEUE), action_count(db_url)) == before


def _event(uuid: str, request_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The host step's event of ``request_id`` once it has finished."""
    deadline = time.monotonic() + timeout_s
    while True:
        [action] = [a for a in api.list_actions(uuid) if a["request_id"] == request_id]
        finished = [e for e in action["events"] if e["finish_time"] is not None]
        if finished:
            return finished[0]
        assert time.monotonic() < deadline, action
        time.sleep(0.1)


def test_the_nmi_reaches_the_guest_from_the_api_and_the_command(db_url: str, worker: None) -> None:
    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("vm", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)

    event = _event(uuid, api.trigger_crash_dump(uuid))
    assert (event["event"], event["result"], event["host"]) == (
        "compute_trigger_crash_dump",
        "Success",
        "host1",
    )
    result = CliRunner().invoke(main, ["trigger-crash-dump", uuid])
    assert result.exit_code == 0, result.output
    assert f"Request to trigger crash dump server {uuid} has been accepted" in result.output
    request_id = result.output.rsplit("(", 1)[1].rstrip(").\n")
    assert _event(uuid, request_id)["result"] == "Success"
    view = api.show(uuid)
    assert (view["status"], view["task_state"], view["fault"]) == ("ACTIVE", None, None)
    delete_and_wait(uuid)


def test_a_guest_that_is_not_running_leaves_a_fault(db_url: str, worker: None) -> None:
    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("vm", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    context.driver().power_off(uuid)  # the guest is down; the server still says ACTIVE

    event = _event(uuid, api.trigger_crash_dump(uuid))
    assert (event["event"], event["result"]) == ("compute_trigger_crash_dump", "Error")
    view = api.show(uuid)
    assert view["status"] == "ACTIVE"
    assert f"Instance {uuid} is not running." in view["fault"]["message"]
    delete_and_wait(uuid)
