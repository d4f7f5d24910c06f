"""What ``dispatch.send`` costs around Celery's publish (issue 16): an operation's publish
does not have the result backend watch a result nobody waits for; a query's still does;
what a failed publish raises is worked out once per broker."""

from __future__ import annotations

from typing import Any

import pytest

from novaq.celery_app import app
from tests.unit.workflows.servers import clear_queues
from workflows import dispatch
from workflows.canvas import step


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The task ids the result backend was asked to watch as they were published."""
    seen: list[str] = []

    def on_task_call(backend: Any, producer: Any, task_id: str) -> None:
        seen.append(task_id)

    monkeypatch.setattr(type(app.backend), "on_task_call", on_task_call)
    return seen


def test_an_operation_is_published_unwatched_and_a_query_watched(watched: list[str]) -> None:
    operation = step("compute.get_diagnostics", instance_uuid="u", host="hostw")
    dispatch.send(operation, recorded=dispatch.Recorded())
    assert watched == []
    query = step("compute.get_diagnostics", instance_uuid="u", host="hostw")
    result = dispatch.send(query, record=False)
    assert watched == [result.id]
    # The backend is as it was: its class's method, no instance attribute left behind.
    assert "on_task_call" not in vars(app.backend)
    clear_queues("compute.hostw")


def test_the_backend_is_restored_when_the_publish_fails(
    watched: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(signature: Any) -> Any:
        raise ConnectionError("broker gone")

    monkeypatch.setattr(dispatch, "_publish_once", fail)
    monkeypatch.setattr(dispatch, "PUBLISH_ATTEMPTS", 1)
    with pytest.raises(Exception, match="broker gone"):
        dispatch.send(
            step("compute.get_diagnostics", instance_uuid="u", host="hostw"),
            recorded=dispatch.Recorded(),
        )
    assert "on_task_call" not in vars(app.backend)


def test_a_publish_within_a_publish_leaves_the_backend_as_it_was(watched: list[str]) -> None:
    with dispatch._awaited(False):
        with dispatch._awaited(False):
            pass
        assert "on_task_call" in vars(app.backend)  # the outer one's, still
    assert "on_task_call" not in vars(app.backend)


def test_broker_errors_are_the_connection_and_channel_errors_every_time() -> None:
    errors = dispatch.broker_errors()
    assert ConnectionError in errors and OSError in errors
    assert set(app.connection_for_write().channel_errors) <= set(errors)
    assert dispatch.broker_errors() is errors  # worked out once for the broker
