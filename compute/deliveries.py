"""Count deliveries of each in-flight step; past a limit the step is given up cleanly.

A row exists only while its step is in flight: it is removed when the step returns
(success, failure or replacement), so what stays behind is the trace of a delivery that
died with its worker.

The writes come in two halves, each a few statements inside a transaction the caller
owns: ``write_start`` (the operation's record of what runs next, the step's durable
record, the count) and ``write_end`` (the record passed on or removed, the step record
ended, the count removed). A step carries them in its own first and last transactions
when it can (``compute.delivery_ledger``); ``record_delivery`` and ``forget_delivery``
are each half in a transaction of its own.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    bindparam,
    delete,
    insert,
    literal_column,
    null,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from compute import in_flight, step_records
from compute.sessions import Sessions
from models import TaskDelivery, utcnow
from models.tables import table_of


@dataclass(frozen=True, slots=True)
class Delivery:
    """One delivery of a step, as its start records it."""

    task_id: str
    task_name: str
    worker: str | None = None
    host: str | None = None
    #: The step's own message, which becomes its operation's record (``compute.in_flight``).
    message: in_flight.Message | None = None
    #: The step's durable record (``compute.step_records``), for instance steps.
    step: step_records.StepStart | None = None
    #: The broker says an earlier delivery of this message died unacknowledged; with no
    #: row of it, that one died before it could count itself: it is counted too.
    redelivered: bool = False


@dataclass(frozen=True, slots=True)
class Ending:
    """How a step returned: ``succeeded`` passes its record to ``successor`` (or removes
    it); ``end`` ends its step record."""

    succeeded: bool = False
    successor: in_flight.Message | None = None
    end: step_records.StepEnd | None = None


def write_start(session: Session, delivery: Delivery) -> int:
    """The start of ``delivery`` in the caller's transaction: its message becomes its
    operation's record, its step record starts (rows in this order, so the reaper's
    ``_bump`` cannot deadlock with it), one more delivery is counted. Returns the count."""
    if delivery.message is not None:
        in_flight.record(session, delivery.message, replacing=True)
    attempts, existed = _count(session, delivery)
    if delivery.step is not None:
        step_records.started(session, delivery.step, redelivered=existed)
    return attempts


def _count(session: Session, delivery: Delivery) -> tuple[int, bool]:
    """One more delivery: (the count now, whether a former delivery's row was there)."""
    first = 2 if delivery.redelivered else 1
    now = utcnow()
    new = {
        "task_id": delivery.task_id,
        "task_name": delivery.task_name,
        "attempts": first,
        "first_at": now,
        "worker": delivery.worker,
        "host": delivery.host,
    }
    upsert = _upsert(session.get_bind().dialect.name)
    if upsert is not None:
        params = {f"p_{key}": value for key, value in new.items()}
        attempts, last_at = session.connection().execute(upsert, params).one()
        return int(attempts), last_at is not None  # (a first row has no last_at)
    return _count_apart(session, delivery, new)


def _count_apart(session: Session, delivery: Delivery, new: dict[str, Any]) -> tuple[int, bool]:
    """``_count`` where the dialect has no upsert: an UPDATE, then an INSERT in a
    savepoint. (Its statements are built here, not in ``_count``: building them cost
    more than the upsert that runs instead everywhere else.)"""
    again = {
        "attempts": TaskDelivery.attempts + 1,
        "last_at": new["first_at"],
        "worker": delivery.worker,
        "host": delivery.host,
        "orphaned_at": None,
    }
    mine = (TaskDelivery.task_id == delivery.task_id) & (
        TaskDelivery.task_name == delivery.task_name
    )
    for _ in range(3):
        if session.execute(update(TaskDelivery).where(mine).values(**again)).rowcount:  # type: ignore[attr-defined]
            return int(session.scalar(select(TaskDelivery.attempts).where(mine)) or 0), True
        try:
            with session.begin_nested():
                session.execute(insert(TaskDelivery).values(**new))
            return int(new["attempts"]), False
        except IntegrityError:  # another delivery inserted it meanwhile: count on it
            continue
    raise RuntimeError(f"could not count the delivery of {delivery.task_name}[{delivery.task_id}]")


@functools.cache
def _upsert(dialect: str) -> Any:
    """``INSERT ... ON CONFLICT DO UPDATE ... RETURNING`` where the dialect has it
    (SQLite, PostgreSQL): the count in one statement, built once per dialect (its values
    are parameters). None elsewhere (an UPDATE, then an INSERT in a savepoint).

    NOTE: as a ``text()`` of the statement compiled once, because SQLAlchemy caches no
    compiled form of a dialect's ``on_conflict_do_update`` (its ``Insert`` has no cache
    key): run as it is built, it was compiled again at every delivery of every step.
    The text keeps the columns' types, for its parameters and for what it returns."""
    table = table_of(TaskDelivery)
    if dialect == "postgresql":
        into: Any = postgresql.insert(table)
        compiler: Any = postgresql.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
    elif dialect == "sqlite":
        into = sqlite.insert(table)
        compiler = sqlite.dialect(paramstyle="named")
    else:
        return None
    c = table.c
    param = {name: bindparam(f"p_{name}", type_=c[name].type) for name in _NEW}
    again = {
        # (literal SQL, not parameters: the text names only the p_ parameters)
        "attempts": c.attempts + literal_column("1"),
        "last_at": param["first_at"],
        "worker": param["worker"],
        "host": param["host"],
        "orphaned_at": null(),
    }
    upsert = into.values(**param).on_conflict_do_update(
        index_elements=["task_id", "task_name"], set_=again
    )
    sql = str(upsert.returning(c.attempts, c.last_at).compile(dialect=compiler))
    return (
        text(sql)
        .bindparams(*param.values())
        .columns(attempts=c.attempts.type, last_at=c.last_at.type)
    )


#: The columns of a first delivery's row.
_NEW = ("task_id", "task_name", "attempts", "first_at", "worker", "host")


def write_end(session: Session, task_id: str, task_name: str, ending: Ending) -> None:
    """The step ``task_id`` returned, in the caller's transaction. When it ``succeeded``,
    its operation's record passes to ``successor`` (the chain's next step) or goes; a
    failed step leaves the record to the errback's undo (the reaper drops it once the
    instance left the operation's task_state, or sends the step again if the undo could
    not run). Rows in the order ``write_start`` writes them."""
    if ending.succeeded:
        in_flight.step_ended(session, task_id, ending.successor)
    if ending.end is not None:
        step_records.ended(session, task_id, ending.end)
    # (on the connection, as every statement of a delivery: ``compute.step_records``)
    session.connection().execute(_forget(), {"p_task_id": task_id, "p_task_name": task_name})


@functools.cache
def _forget() -> Any:
    """The DELETE of a delivery's row, built once.

    NOTE: on the table, not the ORM entity, and with parameters: every step runs it, and
    an ORM DELETE built per call pays for its construction, its cache key and the
    session's synchronisation (no ``TaskDelivery`` is ever loaded where a step ends)."""
    table = table_of(TaskDelivery)
    c = table.c
    return delete(table).where(
        c.task_id == bindparam("p_task_id", type_=c.task_id.type),
        c.task_name == bindparam("p_task_name", type_=c.task_name.type),
    )


def record_delivery(sessions: Sessions, delivery: Delivery) -> int:
    """``write_start`` in a transaction of its own; returns the count so far. (Two first
    deliveries at once: the step record's unique row fails one, which counts again.)"""
    for _ in range(3):
        try:
            with sessions() as session:
                return write_start(session, delivery)
        except IntegrityError:
            continue
    raise RuntimeError(f"could not count the delivery of {delivery.task_name}[{delivery.task_id}]")


def forget_delivery(sessions: Sessions, task_id: str, task_name: str, ending: Ending) -> None:
    """``write_end`` in a transaction of its own."""
    with sessions() as session:
        write_end(session, task_id, task_name, ending)


def settle_delivery(sessions: Sessions, delivery: Delivery, ending: Ending) -> None:
    """A step that returned before any of its transactions carried its start: both
    halves in one transaction (its step record then shows it started and ended)."""
    for _ in range(3):
        try:
            with sessions() as session:
                write_start(session, delivery)
                write_end(session, delivery.task_id, delivery.task_name, ending)
                return
        except IntegrityError:
            continue
    raise RuntimeError(f"could not record the delivery of {delivery.task_name}[{delivery.task_id}]")
