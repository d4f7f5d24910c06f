"""Every novaq task (``tasks.base.NovaqTask``) waits out a database outage: its call is
made again after a ``DatabaseUnavailable`` until ``[database] outage_tolerance_s`` has
passed; error callbacks, which Celery calls in-process through the same ``__call__``,
wait the same way so the undo is not lost; a step sent through a real in-thread worker
rides out an outage and ends as it would have."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from compute.instance_actions import latest_fault
from compute.instance_state import get_instance
from models.db import session_scope
from novaq.celery_app import app
from novaq.exceptions import DatabaseUnavailable, HypervisorError
from novaq.settings import load_settings
from tasks import base, context
from tasks.lifecycle import on_lifecycle_error
from tests.db_outage import ScheduledOutage
from tests.factories import make_instance
from workflows import api

calls: list[int] = []


@app.task(name="tests.unit.flaky_database", count_deliveries=False)
def flaky_database(failures: int) -> str:
    calls.append(1)
    if len(calls) <= failures:
        raise DatabaseUnavailable(reason=f"connection refused (call {len(calls)})")
    return "done"


@pytest.fixture
def quick_patience(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks wait at most 1 s, trying every 10-50 ms (instead of 90 s, every 1-10 s)."""
    settings = load_settings(
        database={
            "outage_tolerance_s": 1.0,
            "db_retry_interval": 0.01,
            "db_max_retry_interval": 0.05,
        }
    )
    monkeypatch.setattr(base, "get_settings", lambda: settings)
    calls.clear()


def test_a_task_the_database_failed_is_run_again_once_it_answers(quick_patience: None) -> None:
    assert flaky_database(3) == "done"
    assert len(calls) == 4


def test_a_task_gives_up_once_the_outage_outlasts_its_budget(quick_patience: None) -> None:
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="connection refused"):
        flaky_database(10**6)
    assert time.monotonic() - started >= 1.0 and len(calls) > 5


@pytest.fixture
def outage(db_url: str, monkeypatch: pytest.MonkeyPatch, quick_patience: None) -> ScheduledOutage:
    """The workers' transactions (``tasks.context.sessions``) go through a scheduled
    outage; the test's own and the API's do not."""
    db = ScheduledOutage(db_url)
    monkeypatch.setattr(context, "sessions", lambda: db)
    return db


def test_an_errback_waits_for_the_database_then_undoes_the_step(
    db_url: str, outage: ScheduledOutage
) -> None:
    uuid = make_instance(
        db_url, host="host1", node="host1", vm_state="active", task_state="powering-off"
    )
    request = SimpleNamespace(
        task="compute.stop_instance",
        kwargs={"instance_uuid": uuid, "request_id": "req-test", "host": "host1"},
    )
    outage.plan = ["down"] * 5
    # As Celery calls a new-style errback: the task object, in the failed step's process.
    on_lifecycle_error(request, HypervisorError(reason="the step failed"), None)
    assert outage.failed == 5
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        fault = latest_fault(session, uuid)
        assert (instance.vm_state, instance.task_state) == ("active", None)
        assert fault is not None and fault.message == "Hypervisor error: the step failed"


@pytest.fixture
def booted(db_url: str, worker: None) -> Iterator[str]:
    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("vm", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    yield uuid
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


def test_a_stop_sent_while_the_database_is_down_ends_shutoff(
    booted: str, outage: ScheduledOutage
) -> None:
    outage.plan = ["down"] * 5  # the first five connects of the worker are refused
    api.stop(booted)
    view: dict[str, Any] = api.wait(booted, "SHUTOFF", timeout=30)
    assert outage.failed == 5
    assert (view["task_state"], view["fault"]) == (None, None)
    [_, stop] = api.list_actions(booted)
    assert [(e["event"], e["result"]) for e in stop["events"]] == [
        ("compute_stop_instance", "Success")
    ]
