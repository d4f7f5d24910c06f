"""Write, then publish, never leaves a half-done request (issue 14, item 4): for every API
call that writes the database and then publishes a workflow, a publish that fails for
good after the write leaves the whole database exactly as it was (instance columns,
actions, migrations, allocations, group members) and nothing queued, with
``ServiceUnavailable``; the same call made again afterwards works normally. A request a
worker has already taken over stands."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.result import AsyncResult
from sqlalchemy import select

from compute import instance_actions as actions
from models import InstanceAction
from models.db import session_scope
from novaq import fault_points
from novaq.exceptions import ServiceUnavailable
from novaq.settings import get_settings
from tests.unit.workflows.publish_faults import (
    CASES,
    Case,
    call_with_broker_down_at_publish,
    database,
    late_copy,
    make_server,
    request_rows,
)
from tests.unit.workflows.servers import clear_queues, placed_server, queued
from workflows import api, dispatch
from workflows.api import common as api_common

QUEUES = ("scheduler", "compute.host1")


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv(fault_points.ENV, str(tmp_path))
    clear_queues(*QUEUES)
    yield tmp_path
    clear_queues(*QUEUES)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES])
def test_a_publish_that_fails_after_the_write_leaves_everything_as_it_was(
    db_url: str, faults: Path, case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    if case.soft:  # Nova's reclaim_instance_interval, as the API reads it
        soft = get_settings().model_copy(update={"reclaim_instance_interval": 3600})
        monkeypatch.setattr(api_common, "settings", lambda: soft)
    uuid = make_server(db_url, case)
    before = database(db_url)
    point = f"publish:{case.first_task}"
    fault_points.arm_raise(faults, point)

    with pytest.raises(ServiceUnavailable, match="message broker"):
        case.call(uuid)

    assert not (faults / f"{point}.raise").exists(), "the call published another task first"
    assert database(db_url) == before
    assert queued(*QUEUES) == 0

    # The broker is back: the same call works normally, and publishes its workflow.
    assert case.call(uuid)
    assert database(db_url) != before
    assert queued(*QUEUES) == 1


#: Every public call that writes and then publishes a workflow.
PUBLISHING_CALLS = [
    "boot",
    "delete",
    "soft_delete",
    "force_stop",
    "stop",
    "start",
    "reboot",
    "pause",
    "unpause",
    "suspend",
    "resume",
    "rescue",
    "unrescue",
    "trigger_crash_dump",
    "shelve",
    "shelve_offload",
    "unshelve",
    "restore",
    "resize",
    "migrate",
    "confirm_resize",
    "revert_resize",
]


def test_the_table_covers_every_call_that_publishes_after_a_write() -> None:
    ids = {c.id for c in CASES}
    assert {name.replace("_", "-") for name in PUBLISHING_CALLS} <= ids


def test_only_the_helper_publishes_workflows_from_the_api() -> None:
    """A new write-then-publish call must go through ``submit.publish`` (the queries of
    ``admin`` wait for their answers and write nothing)."""
    api_dir = Path(api.__file__).parent
    senders = {path.name for path in api_dir.glob("*.py") if "dispatch.send(" in path.read_text()}
    assert senders == {"submit.py", "admin.py"}


def test_a_broker_that_is_down_at_the_publish_is_retried_then_the_write_taken_back(
    db_url: str, faults: Path, caplog: pytest.LogCaptureFixture
) -> None:
    uuid = placed_server(db_url, "active")
    before = database(db_url)
    caplog.set_level(logging.WARNING, logger=dispatch.__name__)

    value, error = call_with_broker_down_at_publish(
        faults, "publish:compute.stop_instance", lambda: api.stop(uuid), lambda: None
    )

    assert value is None and isinstance(error, ServiceUnavailable), (value, error)
    assert "message broker" in str(error)
    retries = [r for r in caplog.records if r.name == dispatch.__name__]
    assert len(retries) == dispatch.PUBLISH_ATTEMPTS - 1
    assert database(db_url) == before
    assert api.stop(uuid)  # the broker is back
    assert api.show(uuid)["task_state"] == "powering-off"


def test_a_request_a_worker_already_took_over_stands_although_its_publish_failed(
    db_url: str, faults: Path
) -> None:
    """The broker took the message and the connection dropped before it said so: the
    step's begin opened its event under the request's action. The request is running,
    so it is returned as accepted, not taken back."""
    uuid = placed_server(db_url, "active")

    def begin_as_the_host_would() -> None:
        with session_scope(db_url) as session:
            action = session.scalars(
                select(InstanceAction).where(
                    InstanceAction.instance_uuid == uuid, InstanceAction.action == "stop"
                )
            ).one()
            actions.start_event(session, uuid, action.request_id, "compute_stop_instance", "host1")

    value, error = call_with_broker_down_at_publish(
        faults, "publish:compute.stop_instance", lambda: api.stop(uuid), begin_as_the_host_would
    )

    assert error is None and isinstance(value, str)
    assert api.show(uuid)["task_state"] == "powering-off"
    [action] = [a for a in api.list_actions(uuid) if a["action"] == "stop"]
    assert action["request_id"] == value and len(action["events"]) == 1


def test_a_boot_the_scheduler_already_placed_stands_although_its_publish_failed(
    db_url: str, faults: Path
) -> None:
    from compute.sessions import sessions_for
    from models import Instance
    from scheduler.manager import Scheduler
    from scheduler.request_spec import RequestSpec
    from tests.factories import make_compute_node

    api.create_flavor("m1", 1, 512, 1)
    make_compute_node(db_url, "host1")

    def place_as_the_scheduler_would() -> None:
        with session_scope(db_url) as session:
            instance = session.scalars(select(Instance)).one()
            spec = RequestSpec.from_dict(dict(instance.request_spec))
        Scheduler(get_settings()).schedule(sessions_for(db_url), [spec])

    value, error = call_with_broker_down_at_publish(
        faults,
        "publish:scheduler.select_destinations",
        lambda: api.boot("vm", "m1", "cirros"),
        place_as_the_scheduler_would,
    )

    assert error is None and isinstance(value, list)
    [uuid] = value
    view = api.show(uuid)
    assert (view["host"], view["task_state"]) == ("host1", "scheduling")
    [host] = api.list_hosts()
    assert host["memory_mb_used"] == 512 + 512  # the claim stays with the running boot


#: Calls whose message, reaching the broker after all, must do nothing once the request
#: was taken back (delete is the exception: its terminate outranks every state).
LATE = ["boot", "stop", "trigger-crash-dump", "unshelve-offloaded", "resize"]
LATE += ["confirm-resize", "revert-resize"]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in CASES if c.id in LATE])
def test_a_message_that_reached_the_broker_for_a_request_taken_back_does_nothing(
    db_url: str, faults: Path, case: Case
) -> None:
    """The ambiguous failure: the broker took the message but the publish reported a
    failure, and the request was taken back. When a worker gets the message later, its
    steps find the request's state gone and end without changing anything."""
    uuid = make_server(db_url, case)
    with _worker(queues=list(QUEUES)):
        pass  # its start-up (host1 recovered, allocations healed) is not what is looked at
    copies: list[AsyncResult] = []

    def publish_a_copy() -> None:
        copies.append(late_copy(db_url, case.id, uuid).apply_async())

    value, error = call_with_broker_down_at_publish(
        faults, f"publish:{case.first_task}", lambda: case.call(uuid), publish_a_copy
    )
    assert isinstance(error, ServiceUnavailable), (value, error)
    taken_back = request_rows(db_url)

    with _worker(queues=list(QUEUES)):
        outcome = copies[0].get(timeout=30, propagate=False)
        deadline = time.monotonic() + 30
        while queued(*QUEUES) and time.monotonic() < deadline:
            time.sleep(0.1)

    assert request_rows(db_url) == taken_back
    if case.id == "resize":
        # NOTE: tasks/moves.select_for_move reads the migration first and fails on the
        # missing row (its errback, abort_move, then finds nothing to undo).
        assert "MigrationNotFound" in type(outcome).__name__, outcome
    else:
        assert not isinstance(outcome, BaseException), outcome


def _worker(queues: list[str]) -> contextlib.AbstractContextManager[Any]:
    from tests.unit.workflows.servers import in_thread_worker

    return in_thread_worker(tuple(queues), concurrency=1)
