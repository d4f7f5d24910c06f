"""Compare-and-swap updates of an instance's state (Nova's ``expected_task_state``).

An UPDATE filtered on the expected task_state (and optionally vm_state) is the
per-instance lock across processes: a redelivered or racing step finds the state moved
and gets ``UnexpectedTaskStateError`` instead of doing harm.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, Final, NoReturn

from sqlalchemy import (
    ClauseElement,
    ColumnElement,
    Select,
    Update,
    bindparam,
    inspect,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from compute.fresh_claim import Placing
from models import Instance, utcnow
from models.tables import table_of
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError


class _Unchecked:
    """No expectation on a column: ``None`` is an expected task_state, not "any"."""


_ANY = _Unchecked()


def get_instance(
    session: Session, uuid: str, *, with_deleted: bool = True, lock: bool = False
) -> Instance:
    """The instance row; ``lock`` takes its row lock first (SELECT … FOR UPDATE), so what
    the transaction reads next (its allocations) cannot change under a concurrent claim
    that also writes this row."""
    instance = session.scalars(_get_statement(with_deleted, lock), {"g_uuid": uuid}).first()
    if instance is None:
        raise InstanceNotFound(uuid=uuid)
    return instance


@functools.cache
def _get_statement(with_deleted: bool, lock: bool) -> Select[tuple[Instance]]:
    """``get_instance``'s SELECT, built once per variant (every API call and most steps
    read an instance with it; building it cost about as much as running it)."""
    query = select(Instance).where(Instance.uuid == bindparam("g_uuid"))
    if not with_deleted:
        query = query.where(Instance.deleted == 0)
    if lock:
        query = query.with_for_update()
    return query.execution_options(populate_existing=True)


def cas_update(
    session: Session,
    uuid: str,
    *,
    expected_task_state: Iterable[str | None] | _Unchecked = _ANY,
    expected_vm_state: Iterable[str] | _Unchecked = _ANY,
    **values: Any,
) -> None:
    """Update the instance only if its task_state / vm_state are among the expected ones.

    The UPDATE is built once per shape (the expected states, the columns written) and run
    with the values as parameters: building it cost about five times what running it
    costs (issue 16: two per step). A value that is an SQL expression is part of the
    statement, not a parameter: that UPDATE is built for the call."""
    values.setdefault("updated_at", utcnow())
    tasks = _expected(expected_task_state)
    vms = _expected(expected_vm_state)
    statement = _cas_statement(tasks, vms, tuple(sorted(values)), _has_expression(values))
    # The ORM's pending writes first, as an ORM statement's autoflush did: a pending
    # write flushed at the commit would land after the compare-and-swap, not before.
    session.flush()
    if statement is None:
        result = session.execute(_build_cas(tasks, vms, values), {"c_uuid": uuid})
    else:
        params = {f"v_{key}": value for key, value in values.items()}
        params["c_uuid"] = uuid
        # (a Core statement on the table: on the connection, ``compute.step_records``)
        result = session.connection().execute(statement, params)
    if result.rowcount != 1:  # type: ignore[attr-defined]
        _refused(session, uuid, _ANY if tasks is None else tasks, _ANY if vms is None else vms)


def _expected(states: Iterable[Any] | _Unchecked) -> tuple[Any, ...] | None:
    """The expected states as a key of the statement's shape; None: not checked."""
    return None if isinstance(states, _Unchecked) else tuple(states)


def _has_expression(values: dict[str, Any]) -> bool:
    return any(isinstance(value, ClauseElement) for value in values.values())


_INSTANCES: Final = table_of(Instance)
#: The instance's columns by attribute name (what ``cas_update``'s keywords name).
_COLUMNS: Final = dict(inspect(Instance).columns.items())


@functools.cache
def _cas_statement(
    tasks: tuple[str | None, ...] | None,
    vms: tuple[str, ...] | None,
    keys: tuple[str, ...],
    expression: bool,
) -> Update | None:
    """The compare-and-swap of one shape, every value a parameter ``v_<key>``; None when
    a value is an expression (or a key no column of the table: the ORM's statement then
    says what is wrong, as before)."""
    if expression or not all(key in _COLUMNS for key in keys):
        return None
    return _where(update(_INSTANCES), tasks, vms).values(
        {_COLUMNS[key]: bindparam(f"v_{key}", type_=_COLUMNS[key].type) for key in keys}
    )


def _build_cas(
    tasks: tuple[str | None, ...] | None, vms: tuple[str, ...] | None, values: dict[str, Any]
) -> Update:
    """The compare-and-swap of values that hold an expression, built for the call."""
    statement = _where(update(Instance), tasks, vms).values(**values)
    return statement.execution_options(synchronize_session=False)


def _where(
    statement: Update, tasks: tuple[str | None, ...] | None, vms: tuple[str, ...] | None
) -> Update:
    column = _INSTANCES.c
    statement = statement.where(
        column.uuid == bindparam("c_uuid", type_=column.uuid.type), column.deleted == 0
    )
    if tasks is not None:
        named = [state for state in tasks if state is not None]
        clause = in_constants(column.task_state, named)
        if None in tasks:
            clause = or_(clause, column.task_state.is_(None))
        statement = statement.where(clause)
    if vms is not None:
        statement = statement.where(in_constants(column.vm_state, vms))
    return statement


def in_constants(column: ColumnElement[Any], values: Iterable[Any]) -> ColumnElement[bool]:
    """``column IN (values)`` for the constants of a statement built once: one bound
    parameter each, rather than one expanding parameter, whose SQL is rendered again at
    every execution (issue 16: about 35 µs a statement on SQLite). (No values: the
    expanding form, which says what an empty IN means on each database.)"""
    constants = list(values)
    if not constants:
        return column.in_(constants)
    return column.in_([literal(value, column.type) for value in constants])


def write_columns(session: Session, instance: Instance, values: dict[str, Any]) -> None:
    """Write ``values`` to the loaded (and locked) ``instance``'s row with an UPDATE built
    once per set of columns, and set them on ``instance`` as committed state, as a read
    would see them: no ORM flush of the row (about 1 ms a write). The ORM's pending
    writes are flushed first, as they would have been before the row's own."""
    update_columns(session, instance.id, values)
    for key, value in values.items():
        set_committed_value(instance, key, value)


def update_columns(session: Session, instance_id: int, values: dict[str, Any]) -> None:
    """``write_columns`` for a row not loaded as an ``Instance``: by its id."""
    statement = _write_statement(tuple(sorted(values)))
    session.flush()
    params = {"w_id": instance_id, **{f"w_{k}": v for k, v in values.items()}}
    session.connection().execute(statement, params)


@functools.cache
def _write_statement(keys: tuple[str, ...]) -> Update:
    column = _INSTANCES.c
    return (
        update(_INSTANCES)
        .where(column.id == bindparam("w_id", type_=column.id.type))
        .values({_COLUMNS[key]: bindparam(f"w_{key}", type_=_COLUMNS[key].type) for key in keys})
    )


def place(
    session: Session, uuid: str, task_state: str, vm_state: str, host: str, node: str
) -> None:
    """``cas_update(session, uuid, expected_task_state=[task_state],
    expected_vm_state=[vm_state], host=host, node=node)``, with the same errors, from a
    statement built once: the scheduler writes every placement with it, and building the
    UPDATE cost more than running it."""
    params = _place_params(uuid, task_state, vm_state, host, node)
    result = session.execute(_place_statement(False), params)
    placed(session, result.rowcount, uuid, task_state, vm_state)  # type: ignore[attr-defined]


def placing(uuid: str, task_state: str, vm_state: str, host: str, node: str) -> Placing:
    """``place``'s UPDATE for a claim to write in its own statement (``compute.claims``:
    ``claim(..., placing=...)``); ``placed`` checks what it returns."""
    return Placing(_place_statement(True), _place_params(uuid, task_state, vm_state, host, node))


def placed(session: Session, rows: int, uuid: str, task_state: str, vm_state: str) -> None:
    """``place``'s errors when its UPDATE matched ``rows`` rows other than 1."""
    if rows != 1:
        _refused(session, uuid, [task_state], [vm_state])


def _place_params(
    uuid: str, task_state: str, vm_state: str, host: str, node: str
) -> dict[str, Any]:
    return {
        "p_uuid": uuid,
        "p_task_state": task_state,
        "p_vm_state": vm_state,
        "p_host": host,
        "p_node": node,
        "p_updated_at": utcnow(),
    }


@functools.cache
def _place_statement(returning: bool) -> Update:
    table = _INSTANCES
    column = table.c
    statement = (
        update(table)
        .where(
            column.uuid == bindparam("p_uuid", type_=column.uuid.type),
            column.deleted == 0,
            column.task_state == bindparam("p_task_state", type_=column.task_state.type),
            column.vm_state == bindparam("p_vm_state", type_=column.vm_state.type),
        )
        .values(
            host=bindparam("p_host", type_=column.host.type),
            node=bindparam("p_node", type_=column.node.type),
            updated_at=bindparam("p_updated_at", type_=column.updated_at.type),
        )
    )
    return statement.returning(column.id) if returning else statement


def _refused(
    session: Session,
    uuid: str,
    expected_task_state: Iterable[str | None] | _Unchecked,
    expected_vm_state: Iterable[str] | _Unchecked,
) -> NoReturn:
    """Why a compare-and-swap of the instance matched no row: it is gone, or its state is
    not the expected one."""
    actual = session.execute(
        select(Instance.vm_state, Instance.task_state, Instance.deleted).where(
            Instance.uuid == uuid
        )
    ).first()
    if actual is None:
        raise InstanceNotFound(uuid=uuid)
    raise UnexpectedTaskStateError(
        uuid=uuid,
        expected=_describe(expected_task_state, expected_vm_state),
        actual=f"{actual.vm_state}/{actual.task_state}" + (" (deleted)" if actual.deleted else ""),
    )


def _describe(task: Iterable[str | None] | _Unchecked, vm: Iterable[str] | _Unchecked) -> str:
    parts = []
    if not isinstance(vm, _Unchecked):
        parts.append(f"vm_state in {list(vm)}")
    if not isinstance(task, _Unchecked):
        parts.append(f"task_state in {list(task)}")
    return " and ".join(parts) or "any state"
