"""Versioned notifications read back from the real broker (Redis; RabbitMQ too where
marked) by a consumer of the ``notifications`` exchange, as a Nova notification listener
would."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection, Queue

from compute.notifications import EXCHANGE
from novaq.exceptions import FlavorExists
from tests.integration.brokers import Deployment, on_both_brokers
from workflows import api

pytestmark = pytest.mark.integration


@pytest.fixture
def listener(deployment: Deployment) -> Iterator[Any]:
    queue = Queue(
        "novaq-test-notifications",
        exchange=EXCHANGE,
        routing_key="versioned_notifications.#",
        durable=False,
    )
    with Connection(deployment.broker.url) as connection:
        bound = queue(connection.default_channel)
        bound.declare()
        bound.purge()
        yield connection.SimpleQueue(bound)
        bound.delete()


def _read_until(listener: Any, wanted: str, uuid: str, limit: int = 50) -> list[dict[str, Any]]:
    seen = []
    for _ in range(limit):
        message = listener.get(timeout=10)
        message.ack()
        body = message.payload
        if body["payload"]["nova_object.data"]["uuid"] == uuid:
            seen.append(body)
            if body["event_type"] == wanted:
                return seen
    raise AssertionError(f"{wanted} never came: {[s['event_type'] for s in seen]}")


@on_both_brokers
def test_boot_and_delete_emit_novas_versioned_notifications(listener: Any) -> None:
    with contextlib.suppress(FlavorExists):
        api.create_flavor("nt.small", 1, 512, 1)
    [uuid] = api.boot("noticed", "nt.small", "cirros")
    created = _read_until(listener, "instance.create.end", uuid)
    assert [m["event_type"] for m in created] == ["instance.create.start", "instance.create.end"]
    end = created[-1]
    data = end["payload"]["nova_object.data"]
    assert end["payload"]["nova_object.name"] == "InstanceActionPayload"
    assert end["priority"] == "INFO" and end["publisher_id"] == f"nova-compute:{data['host']}"
    assert (data["state"], data["power_state"], data["display_name"]) == (
        "active",
        "running",
        "noticed",
    )
    assert data["flavor"]["nova_object.data"]["name"] == "nt.small"
    assert data["launched_at"] is not None
    api.delete(uuid)
    deleted = _read_until(listener, "instance.delete.end", uuid)
    assert deleted[-1]["payload"]["nova_object.data"]["state"] == "deleted"
