"""Which servers ``list_instances`` returns, as Nova's server list chooses them.

Filters: ``name`` a regular expression searched in the name (Nova's regex filters),
``status`` one of Nova's statuses, ``host``, ``flavor`` (the flavor the server has now,
by name or id), ``vm_state``, ``locked`` (Nova 2.73), ``deleted`` (True: only deleted
and soft-deleted servers, as Nova's ``--deleted``; False, the default: neither). Then
Nova's pagination: the servers after ``marker`` (a server's uuid, deleted or not;
unknown: ``MarkerNotFound``), at most ``limit`` of them. Every filter is checked before
anything is read, so bad input is refused whatever the servers are.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, or_, select
from sqlalchemy.orm import Session, selectinload

from compute.states import api_status
from models import Instance
from models.states import VmState
from novaq.exceptions import InvalidInput, NotFound
from workflows.api import flavors, views
from workflows.gate import is_locked


class MarkerNotFound(NotFound):
    msg_fmt = "Marker %(marker)s could not be found."
    code = 400


@dataclass(frozen=True, slots=True)
class Query:
    """A checked list request: SQL for what the columns hold, Python for the rest."""

    statement: Select[tuple[Instance]]
    keep: tuple[Callable[[Instance], bool], ...]
    limit: int | None


def build(session: Session, filters: dict[str, Any]) -> Query:
    # The metadata of every listed server in one query, not one per row.
    statement = select(Instance).options(selectinload(Instance.metadata_items))
    statement = statement.order_by(Instance.id)
    statement = statement.where(_deleted_clause(filters))
    if "host" in filters:
        statement = statement.where(Instance.host == filters["host"])
    if "vm_state" in filters:
        statement = statement.where(Instance.vm_state == filters["vm_state"])
    if filters.get("marker") is not None:
        statement = statement.where(Instance.id > _marker_id(session, filters["marker"]))
    keep: list[Callable[[Instance], bool]] = []
    if "name" in filters:
        keep.append(_name_matches(filters["name"]))
    if "status" in filters:
        keep.append(_status_is(filters["status"]))
    if "flavor" in filters:
        keep.append(_flavor_is(session, filters["flavor"]))
    if "locked" in filters:
        locked = filters["locked"]
        keep.append(lambda instance: is_locked(instance) == locked)
    limit = filters.get("limit")
    if limit is not None and limit < 0:
        raise InvalidInput(reason=f"limit must be 0 or more, got {limit}", field="limit")
    return Query(statement, tuple(keep), limit)


def run(session: Session, query: Query) -> list[dict[str, Any]]:
    """The views of the servers ``query`` selects (image names read once for all)."""
    rows: list[Instance] = []
    for instance in session.scalars(query.statement):
        if query.limit is not None and len(rows) >= query.limit:
            break
        if all(keep(instance) for keep in query.keep):
            rows.append(instance)
    names = views.image_names(session, {i.image_ref for i in rows})
    return [views.instance_dict(session, i, names) for i in rows]


def _deleted_clause(filters: dict[str, Any]) -> ColumnElement[bool]:
    """Nova's ``deleted`` filter: a soft-deleted server counts as deleted (listed with
    ``deleted``, not without). Asking for the DELETED or SOFT_DELETED status without
    saying ``deleted`` means deleted servers (Nova does so for DELETED)."""
    deleted = filters.get("deleted")
    if deleted is None:
        deleted = str(filters.get("status", "")).upper() in ("DELETED", "SOFT_DELETED")
    soft = Instance.vm_state == VmState.SOFT_DELETED
    if deleted:
        return or_(Instance.deleted != 0, soft)
    return and_(Instance.deleted == 0, ~soft)


def _marker_id(session: Session, marker: str) -> int:
    found = session.scalars(select(Instance.id).where(Instance.uuid == marker)).first()
    if found is None:
        raise MarkerNotFound(marker=marker)
    return found


def _name_matches(pattern: str) -> Callable[[Instance], bool]:
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise InvalidInput(
            reason=f"name must be a regular expression, got {pattern!r}: {exc}", field="name"
        ) from None
    return lambda instance: compiled.search(instance.display_name) is not None


def _status_is(status: str) -> Callable[[Instance], bool]:
    wanted = status.upper()
    if wanted not in views.STATUSES:
        raise InvalidInput(
            reason=f"status must be one of {', '.join(sorted(views.STATUSES))}, got {status!r}",
            field="status",
        )
    return lambda instance: api_status(instance.vm_state, instance.task_state) == wanted


def _flavor_is(session: Session, ref: str) -> Callable[[Instance], bool]:
    flavorid = flavors.get_flavor(session, ref).flavorid
    return lambda instance: instance.flavor.flavorid == flavorid
