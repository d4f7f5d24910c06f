"""Compare-and-swap updates of an instance's state (Nova's ``expected_task_state``).

An UPDATE filtered on the expected task_state (and optionally vm_state) is the
per-instance lock across processes: a redelivered or racing step finds the state moved
and gets ``UnexpectedTaskStateError`` instead of doing harm.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, NoReturn

from sqlalchemy import ColumnElement, Update, bindparam, or_, select, update
from sqlalchemy.orm import Session

from models import Instance, utcnow
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
    query = select(Instance).where(Instance.uuid == uuid)
    if not with_deleted:
        query = query.where(Instance.deleted == 0)
    if lock:
        query = query.with_for_update()
    instance = session.scalars(query.execution_options(populate_existing=True)).first()
    if instance is None:
        raise InstanceNotFound(uuid=uuid)
    return instance


def cas_update(
    session: Session,
    uuid: str,
    *,
    expected_task_state: Iterable[str | None] | _Unchecked = _ANY,
    expected_vm_state: Iterable[str] | _Unchecked = _ANY,
    **values: Any,
) -> None:
    """Update the instance only if its task_state / vm_state are among the expected ones."""
    query = update(Instance).where(Instance.uuid == uuid, Instance.deleted == 0)
    if not isinstance(expected_task_state, _Unchecked):
        expected = list(expected_task_state)
        named = [s for s in expected if s is not None]
        clause: ColumnElement[bool] = Instance.task_state.in_(named)
        if None in expected:
            clause = or_(clause, Instance.task_state.is_(None))
        query = query.where(clause)
    if not isinstance(expected_vm_state, _Unchecked):
        query = query.where(Instance.vm_state.in_(list(expected_vm_state)))
    values.setdefault("updated_at", utcnow())
    result = session.execute(query.values(**values).execution_options(synchronize_session=False))
    if result.rowcount != 1:  # type: ignore[attr-defined]
        _refused(session, uuid, expected_task_state, expected_vm_state)


def place(
    session: Session, uuid: str, task_state: str, vm_state: str, host: str, node: str
) -> None:
    """``cas_update(session, uuid, expected_task_state=[task_state],
    expected_vm_state=[vm_state], host=host, node=node)``, with the same errors, from a
    statement built once: the scheduler writes every placement with it, and building the
    UPDATE cost more than running it."""
    params = {
        "b_uuid": uuid,
        "b_task_state": task_state,
        "b_vm_state": vm_state,
        "b_host": host,
        "b_node": node,
        "b_updated_at": utcnow(),
    }
    result = session.execute(_place_statement(), params)
    if result.rowcount != 1:  # type: ignore[attr-defined]
        _refused(session, uuid, [task_state], [vm_state])


@functools.cache
def _place_statement() -> Update:
    table = Instance.__table__.c
    return (
        update(Instance)
        .where(
            Instance.uuid == bindparam("b_uuid", type_=table.uuid.type),
            Instance.deleted == 0,
            Instance.task_state == bindparam("b_task_state", type_=table.task_state.type),
            Instance.vm_state == bindparam("b_vm_state", type_=table.vm_state.type),
        )
        .values(
            host=bindparam("b_host", type_=table.host.type),
            node=bindparam("b_node", type_=table.node.type),
            updated_at=bindparam("b_updated_at", type_=table.updated_at.type),
        )
        .execution_options(synchronize_session=False)
    )


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
