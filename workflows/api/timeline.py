"""A server's whole workflow, across the scheduler and every host: ``timeline(server)``.

Neither Nova nor Celery shows it: Nova's instance actions name what was asked and which
host events ran, Flower shows tasks one by one. The timeline joins, per operation (one
request id, one instance action):

- every step (``step_records``, written by each step as it starts and ends): task and
  task id, the step that sent it, queue, worker and host, start and end, outcome,
  deliveries (a redelivery names its new worker), the server's vm_state, task_state and
  power_state before and after it;
- the action's events (``compute_<method>`` on a host, with their result);
- the faults recorded for the server and the resource heals of its allocations (its own
  and its migrations'), each under the operation that was running when it was recorded.

Everything is in time order. The server may be deleted: its uuid still finds it. A step
is ``unfinished`` while it runs, after its worker died (until it is delivered again), and
for a moment after its last transaction made its change visible: its record ends as it
returns, in the transaction that forgets its delivery.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import (
    Instance,
    InstanceAction,
    InstanceFault,
    Migration,
    ResourceHeal,
    StepRecord,
)
from models.db import session_scope
from models.states import PowerState
from novaq.exceptions import InstanceNotFound
from workflows.api import common
from workflows.api.validation import validated

__all__ = ["timeline"]

#: The operation of steps whose request has no instance action (none is known).
UNKNOWN_ACTION = "-"


@validated()
def timeline(server: str) -> dict[str, Any]:
    """Every step of every operation ``server`` (a name or a uuid) went through, grouped
    by operation, in time order: ``{"server": {...}, "operations": [...]}`` (JSON types
    only; times in ISO 8601, UTC)."""
    with session_scope(common.db_url(), read_only=True) as session:
        uuid = common.resolve_server(session, server)
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).first()
        if instance is None:
            raise InstanceNotFound(uuid=uuid)
        return assemble(instance_view(instance), read_rows(session, uuid))


@dataclass(slots=True)
class Rows:
    """What the timeline of one server is made of, as read from the database."""

    actions: list[InstanceAction] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    faults: list[InstanceFault] = field(default_factory=list)
    heals: list[ResourceHeal] = field(default_factory=list)


def read_rows(session: Session, uuid: str) -> Rows:
    migrations = session.scalars(select(Migration.uuid).where(Migration.instance_uuid == uuid))
    consumers = [uuid, *migrations]
    return Rows(
        actions=list(
            session.scalars(
                select(InstanceAction)
                .where(InstanceAction.instance_uuid == uuid)
                .order_by(InstanceAction.start_time, InstanceAction.id)
            )
        ),
        steps=list(
            session.scalars(
                select(StepRecord)
                .where(StepRecord.instance_uuid == uuid)
                .order_by(StepRecord.started_at, StepRecord.id)
            )
        ),
        faults=list(
            session.scalars(
                select(InstanceFault)
                .where(InstanceFault.instance_uuid == uuid)
                .order_by(InstanceFault.created_at, InstanceFault.id)
            )
        ),
        heals=list(
            session.scalars(
                select(ResourceHeal)
                .where(ResourceHeal.consumer_uuid.in_(consumers))
                .order_by(ResourceHeal.created_at, ResourceHeal.id)
            )
        ),
    )


def instance_view(instance: Instance) -> dict[str, Any]:
    return {
        "uuid": instance.uuid,
        "name": instance.display_name,
        "vm_state": _str(instance.vm_state),
        "task_state": _str(instance.task_state),
        "power_state": _power(instance.power_state),
        "host": instance.host,
        "deleted": bool(instance.deleted),
    }


# -- assembly (pure) ------------------------------------------------------------------------


def assemble(server: dict[str, Any], rows: Rows) -> dict[str, Any]:
    """The timeline of ``server`` from its rows: one operation per request id, in the
    order they started; each fault and heal under the operation running at its time."""
    operations: dict[str, dict[str, Any]] = {}
    for action in rows.actions:
        op = operations.setdefault(action.request_id, _operation(action.request_id))
        op.update(
            action=action.action,
            started_at=_iso(action.start_time),
            finished_at=_iso(action.finish_time),
            result=_action_result(action),
        )
        op["events"] = [_event(e) for e in sorted(action.events, key=_event_order)]
    for step in rows.steps:
        op = operations.setdefault(step.request_id, _operation(step.request_id))
        op["steps"].append(step_view(step))
        if op["started_at"] is None or (op["steps"][0]["started_at"] or "") < op["started_at"]:
            op["started_at"] = op["steps"][0]["started_at"]
    ordered = sorted(operations.values(), key=lambda o: (o["started_at"] or "", o["request_id"]))
    for fault in rows.faults:
        _under(ordered, fault.created_at)["faults"].append(_fault(fault))
    for heal in rows.heals:
        _under(ordered, heal.created_at)["heals"].append(_heal(heal))
    return {"server": server, "operations": ordered}


def _operation(request_id: str) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "action": UNKNOWN_ACTION,
        "started_at": None,
        "finished_at": None,
        "result": None,
        "steps": [],
        "events": [],
        "faults": [],
        "heals": [],
    }


def _under(operations: list[dict[str, Any]], at: dt.datetime) -> dict[str, Any]:
    """The operation running at ``at``: the last one started by then (the first if none
    had; a record with no operation at all gets one of its own)."""
    if not operations:
        operations.append(_operation(UNKNOWN_ACTION))
    when = _iso(at) or ""
    chosen = operations[0]
    for op in operations:
        if (op["started_at"] or "") <= when:
            chosen = op
    return chosen


def step_view(step: StepRecord) -> dict[str, Any]:
    return {
        "task": step.task_name,
        "task_id": step.task_id,
        "parent_id": step.parent_id,
        "queue": step.queue,
        "worker": step.worker,
        "host": step.host,
        "started_at": _iso(step.started_at),
        "ended_at": _iso(step.ended_at),
        "duration_s": _duration(step.started_at, step.ended_at),
        "outcome": _str(step.outcome) if step.outcome else "unfinished",
        "detail": step.detail,
        "deliveries": step.deliveries,
        "delivery_log": [line for line in step.delivery_log.splitlines() if line],
        "transitions": {
            "vm_state": [_str(step.vm_state_before), _str(step.vm_state_after)],
            "task_state": [_str(step.task_state_before), _str(step.task_state_after)],
            "power_state": [_power(step.power_state_before), _power(step.power_state_after)],
        },
    }


def _event(event: Any) -> dict[str, Any]:
    return {
        "event": event.event,
        "host": event.host,
        "started_at": _iso(event.start_time),
        "finished_at": _iso(event.finish_time),
        "result": event.result,
        "details": event.details,
    }


def _event_order(event: Any) -> tuple[dt.datetime, int]:
    return (event.start_time, event.id)


def _fault(fault: InstanceFault) -> dict[str, Any]:
    return {
        "code": fault.code,
        "message": fault.message,
        "host": fault.host,
        "created_at": _iso(fault.created_at),
    }


def _heal(heal: ResourceHeal) -> dict[str, Any]:
    return {
        "action": heal.action,
        "host": heal.host,
        "consumer_uuid": heal.consumer_uuid,
        "resources": heal.resources,
        "reason": heal.reason,
        "created_at": _iso(heal.created_at),
    }


def _action_result(action: InstanceAction) -> str:
    if action.message == "Error":
        return "Error"
    return "Success" if action.finish_time is not None else "running"


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _duration(start: dt.datetime | None, end: dt.datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _power(value: int | None) -> str | None:
    if value is None:
        return None
    try:
        return PowerState(value).name
    except ValueError:
        return str(value)
