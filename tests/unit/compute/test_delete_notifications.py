"""A terminate's ``instance.delete.*`` notifications: ``.start`` and ``.end`` read in the
terminate step's own begin and finish transactions (issue 16: no read-only transaction
of their own), the same payloads a read of their own would give; a redelivery still
sends both, a failure ``.error``."""

from __future__ import annotations

from typing import Any

import pytest

from compute.build import build_and_run_instance
from compute.claims import ResourceRequest
from compute.delete import terminate_instance
from compute.instance_actions import start_action
from compute.notifications import _read_payload
from compute.sessions import sessions_for
from compute.steps import StepContext
from models.db import session_scope
from novaq.exceptions import HypervisorError
from tests.factories import claim, host_resources, make_compute_node, make_instance
from tests.unit.compute.conftest import Sent
from virt.fake import FakeDriver


def _active(db_url: str, driver: FakeDriver) -> str:
    uuid = make_instance(db_url, host="host1", node="host1")
    claim(db_url, make_compute_node(db_url, "host1"), uuid, ResourceRequest(1, 512, 1))
    build_and_run_instance(StepContext(sessions_for(db_url), driver, "host1", "req-boot"), uuid)
    with session_scope(db_url) as session:
        start_action(session, uuid, "delete", "req-delete")
    return uuid


def _terminate(db_url: str, driver: FakeDriver, uuid: str) -> str:
    ctx = StepContext(sessions_for(db_url), driver, "host1", "req-delete")
    return terminate_instance(ctx, uuid, "delete")


def _data(message: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = message["payload"]["nova_object.data"]
    return data


def test_start_and_end_carry_the_row_before_and_after_the_terminate(
    db_url: str, sent: Sent
) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _active(db_url, driver)
    sent.clear()

    assert _terminate(db_url, driver, uuid) == "deleted"

    assert [(m["event_type"], p) for m, p in sent] == [
        ("instance.delete.start", "INFO"),
        ("instance.delete.end", "INFO"),
    ]
    start, end = (_data(m) for m, _ in sent)
    assert (start["state"], start["deleted_at"]) == ("active", None)
    assert (end["state"], end["task_state"], end["power_state"]) == ("deleted", None, "pending")
    assert end["deleted_at"] is not None and end["terminated_at"] is not None
    # The same payload a read of its own gives once the terminate is over.
    with session_scope(db_url, read_only=True) as session:
        assert sent[1][0]["payload"] == _read_payload(session, uuid, "req-delete")


def test_a_redelivered_terminate_still_sends_start_and_end(db_url: str, sent: Sent) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _active(db_url, driver)
    _terminate(db_url, driver, uuid)
    sent.clear()

    assert _terminate(db_url, driver, uuid) == "skipped"

    assert [m["event_type"] for m, _ in sent] == ["instance.delete.start", "instance.delete.end"]
    assert all(_data(m)["state"] == "deleted" for m, _ in sent)


class _DestroyFailing(FakeDriver):
    def destroy(self, instance_uuid: str) -> None:
        raise HypervisorError(reason="destroy refused")


def test_a_failed_terminate_sends_start_and_error(db_url: str, sent: Sent) -> None:
    uuid = _active(db_url, FakeDriver(host_resources("host1")))
    sent.clear()

    with pytest.raises(HypervisorError):
        _terminate(db_url, _DestroyFailing(host_resources("host1")), uuid)

    assert [(m["event_type"], p) for m, p in sent] == [
        ("instance.delete.start", "INFO"),
        ("instance.delete.error", "ERROR"),
    ]
    assert _data(sent[1][0])["state"] == "error"
