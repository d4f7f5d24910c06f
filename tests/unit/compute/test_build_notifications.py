"""A build's ``instance.create.*`` notifications: ``.start`` and ``.end`` read in the
build step's own begin and finish transactions (issue 16: no read-only transaction of
their own), the same payloads a read of their own would give."""

from __future__ import annotations

from typing import Any

import pytest

from compute.build import build_and_run_instance
from compute.claims import ResourceRequest
from compute.instance_actions import add_fault
from compute.notifications import _read_payload
from compute.sessions import sessions_for
from compute.steps import StepContext
from models.db import session_scope
from novaq.exceptions import HypervisorError
from tests.costs import counting_sql
from tests.factories import claim, host_resources, make_compute_node, make_instance
from tests.unit.compute.conftest import Sent
from virt.fake import FakeDriver, SpawnFailingDriver


def _placed(db_url: str, node_id: int) -> str:
    uuid = make_instance(db_url, host="host1", node="host1")
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid


def _ctx(db_url: str, driver: FakeDriver) -> StepContext:
    return StepContext(sessions_for(db_url), driver, "host1", "req-test")


def _data(message: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = message["payload"]["nova_object.data"]
    return data


def test_start_and_end_carry_the_row_before_and_after_the_build(db_url: str, sent: Sent) -> None:
    uuid = _placed(db_url, make_compute_node(db_url, "host1"))
    with session_scope(db_url) as session:
        add_fault(session, uuid, RuntimeError("an earlier attempt failed"), "host0")

    result = build_and_run_instance(
        _ctx(db_url, FakeDriver(host_resources("host1"))), uuid, notify=True
    )

    assert result.outcome == "active"
    assert [(m["event_type"], p) for m, p in sent] == [
        ("instance.create.start", "INFO"),
        ("instance.create.end", "INFO"),
    ]
    start, end = (_data(m) for m, _ in sent)
    assert (start["state"], start["task_state"], start["launched_at"]) == (
        "building",
        "scheduling",
        None,
    )
    assert (end["state"], end["task_state"], end["power_state"]) == ("active", None, "running")
    assert end["launched_at"] is not None and end["request_id"] == "req-test"
    assert sent[1][0]["publisher_id"] == "nova-compute:host1"
    for data in (start, end):
        assert data["fault"]["nova_object.data"]["exception_message"] == (
            "an earlier attempt failed"
        )
    # The same payload a read of its own gives once the build is over.
    with session_scope(db_url, read_only=True) as session:
        assert sent[1][0]["payload"] == _read_payload(session, uuid, "req-test")


def test_the_notifications_cost_the_build_no_statement(db_url: str, sent: Sent) -> None:
    node_id = make_compute_node(db_url, "host1")
    quiet, noticed = _placed(db_url, node_id), _placed(db_url, node_id)
    driver = FakeDriver(host_resources("host1"))
    with counting_sql(db_url) as sql:
        build_and_run_instance(_ctx(db_url, driver), quiet)
        without = list(sql.statements)
        sql.reset()
        build_and_run_instance(_ctx(db_url, driver), noticed, notify=True)
        with_them = list(sql.statements)
    assert len(with_them) == len(without)
    assert [m["event_type"] for m, _ in sent] == ["instance.create.start", "instance.create.end"]


def test_a_redelivered_build_sends_only_its_start(db_url: str, sent: Sent) -> None:
    uuid = _placed(db_url, make_compute_node(db_url, "host1"))
    driver = FakeDriver(host_resources("host1"))
    build_and_run_instance(_ctx(db_url, driver), uuid, notify=True)
    sent.clear()
    again = build_and_run_instance(_ctx(db_url, driver), uuid, notify=True)
    assert again.outcome == "skipped"
    assert [m["event_type"] for m, _ in sent] == ["instance.create.start"]
    assert _data(sent[0][0])["state"] == "active"


def test_a_failed_build_sends_start_then_error(db_url: str, sent: Sent) -> None:
    uuid = _placed(db_url, make_compute_node(db_url, "host1"))
    driver = SpawnFailingDriver(host_resources("host1"))
    with pytest.raises(HypervisorError):
        build_and_run_instance(_ctx(db_url, driver), uuid, notify=True)
    assert [(m["event_type"], p) for m, p in sent] == [
        ("instance.create.start", "INFO"),
        ("instance.create.error", "ERROR"),
    ]
    assert _data(sent[1][0])["state"] == "error"


def test_without_notify_a_build_sends_nothing(db_url: str, sent: Sent) -> None:
    uuid = _placed(db_url, make_compute_node(db_url, "host1"))
    build_and_run_instance(_ctx(db_url, FakeDriver(host_resources("host1"))), uuid)
    assert sent == []
