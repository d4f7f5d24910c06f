"""The compare-and-swap of a step's begin and finish (``compute.steps``), from Core
statements built once per shape: ``instance_state.cas_update`` builds its ORM UPDATE at
every call, which cost about five times what running it costs (issue 16: two per step).

Same statement and same errors as ``cas_update`` (it is what this falls back to): the
row of ``uuid``, not deleted, whose task_state is one of ``expected``, gets ``values``
and ``updated_at`` now; no row matched raises what ``cas_update`` raises.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import ClauseElement, ColumnElement, Table, Update, bindparam, inspect, or_, update
from sqlalchemy.orm import Session

from compute.instance_state import cas_update
from models import Instance, utcnow

_INSTANCES: Table = Instance.__table__  # type: ignore[assignment]


def step_cas(
    session: Session, uuid: str, expected: tuple[str | None, ...], values: Mapping[str, Any]
) -> None:
    """``cas_update(session, uuid, expected_task_state=expected, **values)``."""
    written = {"updated_at": utcnow(), **values}
    if any(isinstance(value, ClauseElement) for value in written.values()):
        # An expression is part of the statement, not a parameter: nothing to reuse.
        cas_update(session, uuid, expected_task_state=expected, **written)
        return
    statement = _statement(expected, tuple(sorted(written)))
    params = {f"v_{key}": value for key, value in written.items()}
    # The ORM's pending writes first, as ``cas_update``'s ORM statement autoflushed them:
    # a Core statement does not, and a pending write flushed at the commit would land
    # after the compare-and-swap instead of before it.
    session.flush()
    result = session.execute(statement, {"v_uuid": uuid, **params})
    if result.rowcount != 1:  # type: ignore[attr-defined]
        # NOTE: the step holds the row's lock, so ``cas_update`` matches nothing either
        # and raises why (gone, or another state), as it would have.
        cas_update(session, uuid, expected_task_state=expected, **written)


@functools.cache
def _statement(expected: tuple[str | None, ...], keys: tuple[str, ...]) -> Update:
    """The UPDATE for one shape: which task_states are expected, which columns written."""
    columns = inspect(Instance).columns
    task_state = _INSTANCES.c.task_state
    named = [state for state in expected if state is not None]
    clause: ColumnElement[bool] = task_state.in_(named)
    if None in expected:
        clause = or_(clause, task_state.is_(None))
    return (
        update(_INSTANCES)
        .where(
            _INSTANCES.c.uuid == bindparam("v_uuid", type_=_INSTANCES.c.uuid.type),
            _INSTANCES.c.deleted == 0,
            clause,
        )
        .values({columns[key]: bindparam(f"v_{key}", type_=columns[key].type) for key in keys})
    )
