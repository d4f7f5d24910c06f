"""Nova's versioned notifications (``instance.<action>.start|end|error``), published on the
broker's ``notifications`` topic exchange with routing key ``versioned_notifications.<priority>``
in oslo.messaging's envelope, so tools written for Nova's notification stream can read
them.

A worker's bootstep installs the publisher; without one (plain function calls in tests),
nothing is sent. Emitting never breaks an operation: a publishing error is logged.
``[notifications] notification_format``: ``versioned`` or ``both`` emit; ``unversioned``
emits nothing (novaq has no legacy notifications).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import uuid as uuid_module
from collections.abc import Callable, Iterator
from typing import Any

from kombu import Exchange

from compute.instance_actions import latest_fault
from compute.instance_state import get_instance
from compute.sessions import Sessions
from models import Instance, utcnow
from virt.power_state import NAMES as POWER_STATE_NAMES

LOG = logging.getLogger(__name__)

# kombu ships no type information.
EXCHANGE = Exchange("notifications", type="topic", durable=True)  # type: ignore[no-untyped-call]
TOPIC = "versioned_notifications"

Publisher = Callable[[dict[str, Any], str], None]
_publisher: Publisher | None = None


def install(publisher: Publisher | None) -> None:
    """Set (or, with None, remove) this process's publisher."""
    global _publisher
    _publisher = publisher


def kombu_publisher(connection_factory: Callable[[], Any]) -> Publisher:
    """A publisher over a kombu connection (the Celery app's ``connection_for_write``)."""

    def publish(message: dict[str, Any], priority: str) -> None:
        with connection_factory() as connection:
            producer = connection.Producer(serializer="json")
            producer.publish(
                message,
                exchange=EXCHANGE,
                routing_key=f"{TOPIC}.{priority.lower()}",
                declare=[EXCHANGE],
                retry=True,
                retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2},
            )

    return publish


def _iso(value: dt.datetime | None) -> str | None:
    return value.replace(tzinfo=dt.UTC).isoformat() if value else None


def instance_payload(session: Any, instance: Instance, request_id: str | None) -> dict[str, Any]:
    flavor = instance.flavor
    fault = latest_fault(session, instance.uuid)
    data = {
        "uuid": instance.uuid,
        "display_name": instance.display_name,
        "host": instance.host,
        "node": instance.node,
        "state": instance.vm_state,
        "task_state": instance.task_state,
        "power_state": POWER_STATE_NAMES.get(instance.power_state, "pending"),
        "image_uuid": instance.image_ref,
        "availability_zone": instance.availability_zone,
        "flavor": {
            "nova_object.name": "FlavorPayload",
            "nova_object.data": {
                "name": flavor.name,
                "flavorid": flavor.flavorid,
                "vcpus": flavor.vcpus,
                "memory_mb": flavor.memory_mb,
                "root_gb": flavor.root_gb,
                "ephemeral_gb": flavor.ephemeral_gb,
                "swap": flavor.swap,
                "extra_specs": dict(flavor.extra_specs),
            },
        },
        "created_at": _iso(instance.created_at),
        "launched_at": _iso(instance.launched_at),
        "terminated_at": _iso(instance.terminated_at),
        "deleted_at": _iso(instance.deleted_at),
        "request_id": request_id,
        "action_initiator_user": None,
        "fault": None
        if fault is None
        else {
            "nova_object.name": "ExceptionPayload",
            "nova_object.data": {"exception": fault.message, "exception_message": fault.message},
        },
    }
    return {
        "nova_object.name": "InstanceActionPayload",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.8",
        "nova_object.data": data,
    }


def emit(
    sessions: Sessions,
    event_type: str,
    instance_uuid: str,
    host: str | None,
    request_id: str | None = None,
    priority: str = "INFO",
) -> None:
    """Publish one versioned notification about an instance (best effort)."""
    if _publisher is None:
        return
    try:
        with sessions() as session:
            payload = instance_payload(session, get_instance(session, instance_uuid), request_id)
        _publisher(_message(event_type, payload, host, priority), priority)
    except Exception:  # noqa: BLE001 - a notification never fails the operation
        LOG.exception("Could not emit %s for %s", event_type, instance_uuid)


def _message(
    event_type: str, payload: dict[str, Any], host: str | None, priority: str
) -> dict[str, Any]:
    return {
        "message_id": str(uuid_module.uuid4()),
        "publisher_id": f"nova-compute:{host or 'api'}",
        "event_type": event_type,
        "priority": priority,
        "timestamp": utcnow().isoformat(sep=" "),
        "payload": payload,
    }


def publish(
    event_type: str, payload: dict[str, Any], host: str | None, priority: str = "INFO"
) -> bool:
    """Publish one versioned notification whose payload the caller built (``instance.exists``,
    ``volume.usage``). False if publishing failed (logged); True if sent or nothing installed."""
    if _publisher is None:
        return True
    try:
        _publisher(_message(event_type, payload, host, priority), priority)
    except Exception:  # noqa: BLE001 - a notification never fails the operation
        LOG.exception("Could not emit %s", event_type)
        return False
    return True


@contextlib.contextmanager
def notified(
    sessions: Sessions,
    action: str,
    instance_uuid: str,
    host: str | None,
    request_id: str | None = None,
) -> Iterator[None]:
    """``instance.<action>.start`` before, ``.end`` after, ``.error`` (ERROR) on failure."""
    emit(sessions, f"instance.{action}.start", instance_uuid, host, request_id)
    try:
        yield
    except Exception:
        emit(sessions, f"instance.{action}.error", instance_uuid, host, request_id, "ERROR")
        raise
    emit(sessions, f"instance.{action}.end", instance_uuid, host, request_id)
