"""The durable record of each step of a server's workflow (``models.StepRecord``), kept
after the step returned so ``workflows.api.timeline`` can show it.

Both writes ride in a transaction the step opens anyway (``compute.deliveries``): the
start with the delivery count, the end with the delivery's removal. Each is plain SQL
that reads the instance's states in the same statement, so a step costs two
statements and no commit of its own:

- start: one INSERT ... SELECT from ``instances`` (the states before) of the rows not
  there yet; for a redelivery (its delivery row is still there) one UPDATE instead: one
  more delivery, the new worker. (A copy delivered after its step returned finds no
  delivery row and inserts nothing: Celery's deduplication skips most of those before
  they run, and the step's compare-and-swap the rest.)
- end: one UPDATE whose correlated sub-selects read the states after.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Insert, String, bindparam, insert, literal, select, update
from sqlalchemy.orm import Session

from compute.sessions import Sessions
from models import Instance, StepOutcome, StepRecord, utcnow
from models.base import UTCDateTime
from models.tables import one_or_in, table_of

#: How much of a failure's text a record keeps.
DETAIL_MAX = 2000


@dataclass(frozen=True, slots=True)
class StepStart:
    """A delivery of one step, as its Celery request tells it."""

    task_id: str
    task_name: str
    request_id: str
    instance_uuids: tuple[str, ...]
    parent_id: str | None = None
    queue: str | None = None
    worker: str | None = None
    host: str | None = None


@dataclass(frozen=True, slots=True)
class StepEnd:
    outcome: StepOutcome
    detail: str | None = None


def started(session: Session, start: StepStart, redelivered: bool = False) -> None:
    """Record one delivery of ``start``'s step. A first delivery inserts its rows with
    the states before it; a redelivery (its delivery row still there: the worker died,
    or the reaper sent it again) counts one more on them and names its new worker."""
    if not start.instance_uuids:
        return
    now = utcnow()
    line = f"{start.worker or '-'} {now.isoformat()}\n"
    # NOTE: on the session's connection, after a flush (the ORM statement's autoflush):
    # ``Session.execute`` of a statement costs about 15 us more (its ORM execute state, the
    # session's ``do_orm_execute`` listeners), and a step runs six of these.
    session.flush()
    connection = session.connection()
    if not redelivered:
        connection.execute(_INSERT_FIRST[_single(start)], _first_params(start, now, line))
        return
    connection.execute(
        _REDELIVERED[_single(start)],
        {
            "p_task_id": start.task_id,
            "p_uuids": _uuids_param(start),
            "p_line": line,
            "p_worker": start.worker,
            "p_host": start.host,
            "p_queue": start.queue,
        },
    )


#: The table, not the mapped class: a Core statement with parameters (an ORM one with
#: parameters would be a bulk INSERT of them).
_TABLE = table_of(StepRecord)


def _text(name: str) -> Any:
    return bindparam(name, type_=String())


def _single(start: StepStart) -> bool:
    """Whether ``start`` acts on one instance (every step but a multi-server boot's): its
    statements then match it with ``=`` (``models.tables.one_or_in``)."""
    return len(start.instance_uuids) == 1


def _uuids_param(start: StepStart) -> Any:
    """``p_uuids``: the one uuid, or the list for an expanding ``IN``."""
    return start.instance_uuids[0] if _single(start) else list(start.instance_uuids)


def _redelivered_statement(single: bool) -> Any:
    return (
        update(_TABLE)
        .where(
            _TABLE.c.task_id == _text("p_task_id"),
            one_or_in(_TABLE.c.instance_uuid, "p_uuids", single),
        )
        .values(
            deliveries=_TABLE.c.deliveries + 1,
            delivery_log=_TABLE.c.delivery_log + _text("p_line"),
            worker=_text("p_worker"),
            host=_text("p_host"),
            queue=_text("p_queue"),
            ended_at=None,
            outcome=None,
            detail=None,
        )
    )


#: The statements of a record, built once (issue 16: building them cost about as much as
#: running them), for one instance (True) and for several; their values are parameters.
_REDELIVERED = {single: _redelivered_statement(single) for single in (True, False)}


def _insert_first_statement(single: bool) -> Insert:
    """One row per instance that has none for this task id yet, its states read from
    ``instances`` in the same statement. (Two first deliveries at once: the unique
    constraint fails one, whose transaction is tried again and finds the row.)"""
    recorded = (
        select(StepRecord.id)
        .where(StepRecord.task_id == _text("p_task_id"), StepRecord.instance_uuid == Instance.uuid)
        .exists()
    )
    rows = select(
        Instance.uuid,
        _text("p_request_id"),
        _text("p_task_id"),
        _text("p_task_name"),
        _text("p_parent_id"),
        _text("p_queue"),
        _text("p_worker"),
        _text("p_host"),
        literal(1),
        _text("p_line"),
        bindparam("p_now", type_=UTCDateTime()),
        Instance.vm_state,
        Instance.task_state,
        Instance.power_state,
    ).where(one_or_in(Instance.uuid, "p_uuids", single), ~recorded)
    columns = [
        "instance_uuid",
        "request_id",
        "task_id",
        "task_name",
        "parent_id",
        "queue",
        "worker",
        "host",
        "deliveries",
        "delivery_log",
        "started_at",
        "vm_state_before",
        "task_state_before",
        "power_state_before",
    ]
    return insert(_TABLE).from_select(columns, rows)


_INSERT_FIRST = {single: _insert_first_statement(single) for single in (True, False)}


def _first_params(start: StepStart, now: dt.datetime, line: str) -> dict[str, Any]:
    return {
        "p_uuids": _uuids_param(start),
        "p_request_id": start.request_id,
        "p_task_id": start.task_id,
        "p_task_name": start.task_name,
        "p_parent_id": start.parent_id,
        "p_queue": start.queue,
        "p_worker": start.worker,
        "p_host": start.host,
        "p_line": line,
        "p_now": now,
    }


_INSTANCES = table_of(Instance)


def _now_of(column: Any) -> Any:
    return select(column).where(_INSTANCES.c.uuid == _TABLE.c.instance_uuid).scalar_subquery()


#: NOTE: the tables' columns, not the mapped classes' attributes, here and in
#: ``_REDELIVERED``: an UPDATE whose criteria name a mapped attribute runs as the ORM's
#: bulk UPDATE (its compile state, the session's synchronisation), about 110 µs more
#: per step for the same SQL.
_ENDED = (
    update(_TABLE)
    .where(_TABLE.c.task_id == _text("p_task_id"))
    .values(
        ended_at=bindparam("p_ended_at", type_=_TABLE.c.ended_at.type),
        outcome=bindparam("p_outcome", type_=_TABLE.c.outcome.type),
        detail=bindparam("p_detail", type_=_TABLE.c.detail.type),
        vm_state_after=_now_of(_INSTANCES.c.vm_state),
        task_state_after=_now_of(_INSTANCES.c.task_state),
        power_state_after=_now_of(_INSTANCES.c.power_state),
    )
)


def ended(session: Session, task_id: str, end: StepEnd) -> None:
    """The step ``task_id`` returned: its outcome, and the states it left behind."""
    detail = (end.detail or None) and end.detail[:DETAIL_MAX]
    values = {"p_ended_at": utcnow(), "p_outcome": end.outcome, "p_detail": detail}
    session.connection().execute(_ENDED, {"p_task_id": task_id, **values})


def record_end(sessions: Sessions, task_id: str, end: StepEnd) -> None:
    """``ended`` in a transaction of its own (a retry: no delivery ends with it)."""
    with sessions() as session:
        ended(session, task_id, end)


def record_revoked(sessions: Sessions, start: StepStart, end: StepEnd) -> None:
    """A step revoked before it ran (or while it ran) has a record all the same."""
    with sessions() as session:
        line = f"{start.worker or '-'} (revoked)\n"
        session.execute(_INSERT_FIRST[_single(start)], _first_params(start, utcnow(), line))
        ended(session, start.task_id, end)
