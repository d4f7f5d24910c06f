"""Instance actions, their events and instance faults: the record an operator reads to
learn what happened to a server (Nova's ``instance_actions`` and ``instance_faults``).

An event opens and closes, and an action finishes, with plain INSERT / UPDATE statements
built once (issue 16): no ORM load of the action and its events on a step's path. They
write the tables directly, so a row of them loaded in the same session is not refreshed
(reads that need the new values, such as ``event_result``, read again).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import traceback as tb_module
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Insert, Select, Update, bindparam, func, insert, select, update
from sqlalchemy.orm import Session

from compute.sessions import Sessions
from models import InstanceAction, InstanceActionEvent, InstanceFault, utcnow
from models.tables import table_of
from novaq.exceptions import NovaqError

SUCCESS = "Success"
ERROR = "Error"


def start_action(session: Session, instance_uuid: str, action: str, request_id: str) -> None:
    """Record the request's action, started now, with an INSERT built once (every API
    request writes one: the ORM's flush of a new row cost about 1 ms). The ORM's pending
    writes are flushed first, in the order the flush would have written them."""
    session.flush()
    session.execute(
        _start_action_statement(),
        {
            "a_uuid": instance_uuid,
            "a_action": action,
            "a_request_id": request_id,
            "a_start_time": utcnow(),
        },
    )


@functools.cache
def _start_action_statement() -> Insert:
    table = table_of(InstanceAction)
    return insert(table).values(
        instance_uuid=bindparam("a_uuid", type_=table.c.instance_uuid.type),
        action=bindparam("a_action", type_=table.c.action.type),
        request_id=bindparam("a_request_id", type_=table.c.request_id.type),
        start_time=bindparam("a_start_time", type_=table.c.start_time.type),
    )


def _action(session: Session, instance_uuid: str, request_id: str) -> InstanceAction | None:
    return session.scalars(
        select(InstanceAction)
        .where(
            InstanceAction.instance_uuid == instance_uuid,
            InstanceAction.request_id == request_id,
        )
        .order_by(InstanceAction.id.desc())
    ).first()


def action_open(session: Session, instance_uuid: str, request_id: str) -> bool:
    """Whether the request's action exists and has not finished: a step that sets no
    task_state knows a redelivery by its finished action."""
    row = session.execute(
        _action_finish_time_query(), {"uuid": instance_uuid, "request_id": request_id}
    ).first()
    return row is not None and row.finish_time is None


@functools.cache
def _action_finish_time_query() -> Select[tuple[int, dt.datetime | None]]:
    return (
        select(InstanceAction.id, InstanceAction.finish_time)
        .where(
            InstanceAction.instance_uuid == bindparam("uuid"),
            InstanceAction.request_id == bindparam("request_id"),
        )
        .order_by(InstanceAction.id.desc())
        .limit(1)
    )


def latest_request_id(session: Session, instance_uuid: str) -> str | None:
    """The request of the instance's latest action: where work that has no request of its
    own (a periodic task, start-up recovery) records its events, as Nova's
    ``action_event_start`` falls back to for a context without one."""
    return session.scalar(
        select(InstanceAction.request_id)
        .where(InstanceAction.instance_uuid == instance_uuid)
        .order_by(InstanceAction.id.desc())
        .limit(1)
    )


def start_event(
    session: Session, instance_uuid: str, request_id: str, event: str, host: str | None
) -> int | None:
    """Open ``event`` under the request's (latest) action: its id, None without one."""
    values = {
        "uuid": instance_uuid,
        "request_id": request_id,
        "event": event,
        "host": host,
        "start_time": utcnow(),
    }
    session.flush()  # an action added in this session (a Core statement does not autoflush)
    # (a Core statement on the tables: on the connection, no ORM execution layer)
    event_id: int | None = session.connection().scalar(_start_event_statement(), values)
    return event_id


@functools.cache
def _start_event_statement() -> Insert:
    """One INSERT ... SELECT: the event row under the request's latest action, if any.

    NOTE: on the tables' columns, not the mapped classes' attributes: run on the
    connection (``start_event``), the same SQL without the ORM's compile state."""
    table = table_of(InstanceActionEvent)
    columns = table.c
    actions = table_of(InstanceAction).c
    latest = (
        select(
            actions.id,
            bindparam("event", type_=columns.event.type),
            bindparam("host", type_=columns.host.type),
            bindparam("start_time", type_=columns.start_time.type),
        )
        .where(
            actions.instance_uuid == bindparam("uuid", type_=actions.instance_uuid.type),
            actions.request_id == bindparam("request_id", type_=actions.request_id.type),
        )
        .order_by(actions.id.desc())
        .limit(1)
    )
    return (
        insert(table)
        .from_select(["action_id", "event", "host", "start_time"], latest, include_defaults=False)
        .returning(columns.id)
    )


def event_result(session: Session, event_id: int) -> str | None:
    """The event's result (``Success``, ``Error``), None while it is open or gone."""
    row = session.get(InstanceActionEvent, event_id, populate_existing=True)
    return row.result if row is not None else None


def finish_event(
    session: Session,
    event_id: int,
    result: str,
    traceback: str | None = None,
    details: str | None = None,
    finish_action: bool = False,
) -> None:
    now = utcnow()
    session.flush()  # the ORM's pending writes first, as an ORM statement's autoflush did
    # (Core statements on the tables: on the connection, no ORM execution layer)
    connection = session.connection()
    action_id = connection.scalar(
        _finish_event_statement(),
        {
            "b_event_id": event_id,
            "b_finish_time": now,
            "b_result": result,
            "b_traceback": traceback,
            "b_details": details,
        },
    )
    if action_id is None:
        return
    statement = _end_action_statement(result == ERROR, finish_action)
    if statement is not None:
        connection.execute(statement, {"b_action_id": action_id, "b_finish_time": now})


@functools.cache
def _finish_event_statement() -> Update:
    """Close an event; RETURNING its action's id (none: the event is gone).

    NOTE: on the table, not the mapped class: the same SQL without the ORM's bulk-update
    pass (about 70 us a statement, twice in every step's finish)."""
    table = table_of(InstanceActionEvent)
    return (
        update(table)
        .where(table.c.id == bindparam("b_event_id"))
        .values(
            finish_time=bindparam("b_finish_time"),
            result=bindparam("b_result"),
            traceback=bindparam("b_traceback"),
            details=bindparam("b_details"),
        )
        .returning(table.c.action_id)
    )


@functools.cache
def _end_action_statement(error: bool, finish: bool) -> Update | None:
    """The action's part of an event's end: ``message`` Error after an error, the
    action's ``finish_time`` when the event finishes it (None: nothing to write)."""
    values: dict[str, Any] = {}
    if error:
        values["message"] = ERROR
    if finish:
        values["finish_time"] = bindparam("b_finish_time")
    if not values:
        return None
    table = table_of(InstanceAction)
    return update(table).where(table.c.id == bindparam("b_action_id")).values(**values)


def close_open_events(session: Session, instance_uuid: str, exc: BaseException) -> int:
    """End with ``Error`` every event of the instance still open: the steps a crash
    interrupted (their worker died before it could close them). Returns how many."""
    result, tb, details = outcome(exc)
    rows = session.scalars(
        select(InstanceActionEvent)
        .join(InstanceAction, InstanceAction.id == InstanceActionEvent.action_id)
        .where(
            InstanceAction.instance_uuid == instance_uuid,
            InstanceActionEvent.finish_time.is_(None),
        )
    ).all()
    for row in rows:
        finish_event(session, row.id, result, tb, details)
    return len(rows)


def record_event(
    session: Session,
    instance_uuid: str,
    request_id: str,
    event: str,
    host: str | None,
    exc: BaseException | None = None,
    finish_action: bool = True,
) -> None:
    """Record an event that has already happened (start and finish at once)."""
    event_id = start_event(session, instance_uuid, request_id, event, host)
    if event_id is not None:
        result, tb, details = outcome(exc)
        finish_event(session, event_id, result, tb, details, finish_action=finish_action)


def finish_action(
    session: Session, instance_uuid: str, request_id: str, result: str = SUCCESS
) -> None:
    """End the request's (latest) action; ``message`` Error after an error."""
    session.execute(
        _finish_action_statement(result == ERROR),
        {"b_uuid": instance_uuid, "b_request_id": request_id, "b_finish_time": utcnow()},
    )


@functools.cache
def _finish_action_statement(error: bool) -> Update:
    latest = (
        select(func.max(InstanceAction.id))
        .where(
            InstanceAction.instance_uuid == bindparam("b_uuid"),
            InstanceAction.request_id == bindparam("b_request_id"),
        )
        .scalar_subquery()
    )
    values: dict[str, Any] = {"finish_time": bindparam("b_finish_time")}
    if error:
        values["message"] = ERROR
    return (
        update(InstanceAction)
        .where(InstanceAction.id == latest)
        .values(**values)
        .execution_options(synchronize_session=False)
    )


def end_open_action(
    session: Session,
    instance_uuid: str,
    request_id: str,
    event: str,
    host: str | None,
    exc: BaseException | None = None,
) -> bool:
    """Record ``event`` (``Error`` with ``exc``) and end the request's action, if it is
    still open: for what ends an operation outside its own steps (start-up recovery), so
    that every action records its end. False when it had already ended."""
    if not action_open(session, instance_uuid, request_id):
        return False
    record_event(session, instance_uuid, request_id, event, host, exc)
    return True


def outcome(exc: BaseException | None) -> tuple[str, str | None, str | None]:
    if exc is None:
        return SUCCESS, None, None
    tb = "".join(tb_module.format_exception(type(exc), exc, exc.__traceback__))
    return ERROR, tb, str(exc)


@contextlib.contextmanager
def event_reporter(
    sessions: Sessions,
    instance_uuid: str,
    request_id: str,
    event: str,
    host: str | None,
    finish_action: bool = False,
) -> Iterator[None]:
    """Wrap one workflow step: an event row opens in its own short transaction, and is
    closed with the step's result (and traceback) whatever happens inside."""
    with sessions() as session:
        event_id = start_event(session, instance_uuid, request_id, event, host)
    try:
        yield
    except BaseException as exc:
        if event_id is not None:
            result, tb, details = outcome(exc)
            with sessions() as session:
                finish_event(session, event_id, result, tb, details, finish_action=True)
        raise
    if event_id is not None:
        with sessions() as session:
            finish_event(session, event_id, SUCCESS, finish_action=finish_action)


def add_fault(
    session: Session, instance_uuid: str, exc: BaseException, host: str | None
) -> InstanceFault:
    """Nova's ``add_instance_fault_from_exc``: code from the exception (500 by default),
    message truncated to 255, the traceback only for 500s. An error that says more than
    its message can hold (``NoValidHost``'s whole per-filter list: its ``fault_details``)
    keeps it whole in the details, before the traceback."""
    code = exc.code if isinstance(exc, NovaqError) else 500
    message = (str(exc) or type(exc).__name__)[:255]
    parts = []
    if isinstance(exc, NovaqError) and exc.kwargs.get("fault_details"):
        parts.append(str(exc.kwargs["fault_details"]))
    if code == 500:
        parts.append("".join(tb_module.format_exception(type(exc), exc, exc.__traceback__)))
    details = "\n\n".join(parts) or None
    fault = InstanceFault(
        instance_uuid=instance_uuid, code=code, message=message, details=details, host=host
    )
    session.add(fault)
    return fault


def latest_fault(session: Session, instance_uuid: str) -> InstanceFault | None:
    return session.scalars(
        select(InstanceFault)
        .where(InstanceFault.instance_uuid == instance_uuid)
        .order_by(InstanceFault.id.desc())
    ).first()
