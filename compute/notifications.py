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
from dataclasses import dataclass
from typing import Any, Protocol

from kombu import Exchange
from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.instance_actions import latest_fault
from compute.notification_bindings import BindingWatch, watch_for
from compute.sessions import Sessions
from models import Instance, InstanceFault, utcnow
from models.flavor import FlavorSnapshot
from novaq.exceptions import InstanceNotFound
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


def kombu_publisher(producer_pool: Callable[[], Any]) -> Publisher:
    """A publisher over the Celery app's pool of producers (``producer_pool`` gives it:
    ``lambda: app.producer_pool``, looked up at each message, since a forked pool child
    gets a pool of its own). No broker connection per message: the pooled connection is
    reused, and the exchange is declared once per connection (kombu's ``maybe_declare``
    remembers it).

    On Redis, a message that no bound queue's pattern matches, which kombu would deliver
    nowhere, is not published at all: the exchange's bindings are watched on a tracked
    connection (``compute.notification_bindings``: a queue bound before a publish begins
    still gets it) instead of looked up at each publish (issue 16: ~0.25 ms of CPU each)."""
    watch: list[BindingWatch | None] = []

    def publish(message: dict[str, Any], priority: str) -> None:
        routing_key = f"{TOPIC}.{priority.lower()}"
        if not watch:
            with producer_pool().acquire(block=True) as producer:
                watch.append(watch_for(producer.channel, EXCHANGE.name))
        if watch[0] is not None and watch[0].routes(routing_key) is False:
            return
        with producer_pool().acquire(block=True) as producer:
            producer.publish(
                message,
                serializer="json",
                exchange=EXCHANGE,
                routing_key=routing_key,
                declare=[EXCHANGE],
                retry=True,
                retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2},
            )

    return publish


class PayloadRow(Protocol):
    """What a payload reads of an instance: the ORM ``Instance`` or a step's light row
    (``compute.instance_row.InstanceRow``)."""

    @property
    def uuid(self) -> str: ...
    @property
    def display_name(self) -> str | None: ...
    @property
    def host(self) -> str | None: ...
    @property
    def node(self) -> str | None: ...
    @property
    def vm_state(self) -> str: ...
    @property
    def task_state(self) -> str | None: ...
    @property
    def power_state(self) -> int: ...
    @property
    def image_ref(self) -> str | None: ...
    @property
    def availability_zone(self) -> str | None: ...
    @property
    def flavor(self) -> FlavorSnapshot: ...
    @property
    def created_at(self) -> dt.datetime | None: ...
    @property
    def launched_at(self) -> dt.datetime | None: ...
    @property
    def terminated_at(self) -> dt.datetime | None: ...
    @property
    def deleted_at(self) -> dt.datetime | None: ...


def _iso(value: dt.datetime | None) -> str | None:
    return value.replace(tzinfo=dt.UTC).isoformat() if value else None


def instance_payload(session: Any, instance: Instance, request_id: str | None) -> dict[str, Any]:
    fault = latest_fault(session, instance.uuid)
    return _payload(instance, None if fault is None else fault.message, request_id)


#: The message of the instance's latest fault, a column to read with the instance (a
#: payload then takes one statement: ``instance_payload`` reads them one after the other).
LATEST_FAULT = (
    select(InstanceFault.message)
    .where(InstanceFault.instance_uuid == Instance.uuid)
    .order_by(InstanceFault.id.desc())
    .limit(1)
    .correlate(Instance)
    .scalar_subquery()
)


def _read_payload(session: Session, instance_uuid: str, request_id: str | None) -> dict[str, Any]:
    """The payload of ``instance_uuid`` in one statement (``LATEST_FAULT``)."""
    row = session.execute(
        select(Instance, LATEST_FAULT)
        .where(Instance.uuid == instance_uuid)
        .execution_options(populate_existing=True)
    ).first()
    if row is None:
        raise InstanceNotFound(uuid=instance_uuid)
    return _payload(row[0], row[1], request_id)


def _payload(instance: PayloadRow, fault: str | None, request_id: str | None) -> dict[str, Any]:
    flavor = instance.flavor
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
            "nova_object.data": {"exception": fault, "exception_message": fault},
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
        with sessions(read_only=True) as session:
            payload = _read_payload(session, instance_uuid, request_id)
    except Exception:  # noqa: BLE001 - a notification never fails the operation
        LOG.exception("Could not emit %s for %s", event_type, instance_uuid)
        return
    _send(event_type, payload, host, priority, instance_uuid)


def _send(
    event_type: str,
    payload: dict[str, Any],
    host: str | None,
    priority: str,
    instance_uuid: str | None = None,
) -> bool:
    """The one best-effort publish (``emit``, ``publish``, ``Notice.send``): False if it
    failed (logged), True if sent or nothing installed."""
    publisher = _publisher
    if publisher is None:
        return True
    try:
        publisher(_message(event_type, payload, host, priority), priority)
    except Exception:  # noqa: BLE001 - a notification never fails the operation
        if instance_uuid is None:
            LOG.exception("Could not emit %s", event_type)
        else:
            LOG.exception("Could not emit %s for %s", event_type, instance_uuid)
        return False
    return True


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
    return _send(event_type, payload, host, priority)


@dataclass(slots=True)
class Notice:
    """One notification about an instance whose payload is read in the transaction of
    the step it reports on, from the row that step locked (``read``), and published once
    that transaction has committed (``send``): no transaction of its own (issue 16: a
    notification's own read-only transaction cost as much as the step's work)."""

    event_type: str
    instance_uuid: str
    host: str | None
    request_id: str | None
    payload: dict[str, Any] | None = None

    def read(self, instance: PayloadRow, fault: str | None) -> None:
        """The payload as ``instance`` (and its latest ``fault`` message) is now; read
        again by a transaction that is tried again."""
        self.payload = _payload(instance, fault, self.request_id)

    def send(self) -> None:
        """Publish what was read, once (best effort, as ``emit``); nothing if nothing was."""
        payload, self.payload = self.payload, None
        if payload is not None:
            _send(self.event_type, payload, self.host, "INFO", self.instance_uuid)


@dataclass(frozen=True, slots=True)
class StepNotices:
    """``instance.<action>.start`` read in a step's begin, ``.end`` in its finish."""

    start: Notice
    end: Notice


def step_notices(
    action: str, instance_uuid: str, host: str | None, request_id: str | None
) -> StepNotices | None:
    """The ``.start`` and ``.end`` of ``action`` to read in a step's transactions; None
    when no publisher is installed (nothing to read)."""
    if _publisher is None:
        return None
    return StepNotices(
        Notice(f"instance.{action}.start", instance_uuid, host, request_id),
        Notice(f"instance.{action}.end", instance_uuid, host, request_id),
    )


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
