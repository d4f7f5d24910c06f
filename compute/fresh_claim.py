"""A fresh claim's writes in one statement on PostgreSQL: the allocations, the node's
generation compare-and-swap and, in the same statement, what the caller places with the
claim (the scheduler: the instance's host and node, under its own compare-and-swap).

Data-modifying CTEs run once each, to completion, on the statement's one snapshot, and
the two UPDATEs keep their guards (a concurrent claim that bumped the generation, or a
delete that moved the instance's state, makes its UPDATE match no row under read
committed). The INSERT and the placing read the compare-and-swap's RETURNING, so a claim
that lost the generation race writes nothing. The statement returns how many rows each
wrote, and the caller raises what the separate statements raised (``GenerationConflict``
first, then the placing's error). Three statements (three round trips) become one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ARRAY,
    Integer,
    Select,
    String,
    bindparam,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.orm import Session

from models import Allocation, ComputeNode, utcnow
from models.tables import table_of

_allocations = table_of(Allocation)
_nodes = table_of(ComputeNode)

#: The node's columns derived from its allocations (``compute.claims._USAGE_COLUMNS``).
USAGE_COLUMNS = (
    "vcpus_used",
    "memory_mb_used",
    "local_gb_used",
    "free_ram_mb",
    "free_disk_gb",
    "running_vms",
)


@dataclass(frozen=True, slots=True)
class Placing:
    """An UPDATE written in a fresh claim's statement on PostgreSQL (``statement``, a
    Core UPDATE with RETURNING, built once by its owner, and its ``params``); the claim
    returns how many rows it updated."""

    statement: Any
    params: dict[str, Any]


def write_fresh_claim(
    session: Session,
    node_id: int,
    consumer_uuid: str,
    amounts: list[tuple[str, int]],
    generation: int,
    usage: dict[str, int],
    placing: Placing,
) -> tuple[int, int]:
    """Insert ``amounts`` ((resource class, used) for ``consumer_uuid`` on the node), swap
    the node's ``usage`` (``b_*`` values) in if its generation is still ``generation``,
    and run ``placing``: one statement. Returns (node rows swapped, rows placed)."""
    params: dict[str, Any] = {
        "a_node": node_id,
        "a_consumer": consumer_uuid,
        "a_created": utcnow(),
        "b_node": node_id,
        "b_generation": generation,
        **usage,
        **placing.params,
    }
    params["a_classes"] = [rc for rc, _ in amounts]
    params["a_used"] = [used for _, used in amounts]
    swapped, placed, _inserted = session.execute(_statement(placing.statement), params).one()
    return int(swapped), int(placed)


@functools.cache
def _statement(placing: Any) -> Select[tuple[int, int, int]]:
    # NOTE: the classes go in as two arrays (unnest), not as a multi-row VALUES:
    # SQLAlchemy caches no compiled multi-row VALUES, and compiling this statement cost
    # more than a round trip.
    amounts = (
        func.unnest(
            bindparam("a_classes", type_=ARRAY(String)), bindparam("a_used", type_=ARRAY(Integer))
        )
        .table_valued("resource_class", "used")
        .render_derived()
    )
    swapped = (
        update(_nodes)
        .where(
            _nodes.c.id == bindparam("b_node", type_=Integer),
            _nodes.c.generation == bindparam("b_generation", type_=Integer),
        )
        .values(
            {name: bindparam(f"b_{name}", type_=Integer) for name in USAGE_COLUMNS}
            | {"generation": bindparam("b_generation", type_=Integer) + 1}
        )
        .returning(_nodes.c.id)
        .cte("swapped")
    )
    # NOTE: the INSERT and the placing hang on the compare-and-swap (they read its
    # RETURNING), so a claim that lost the generation race writes nothing at all: its
    # transaction may claim again (``compute.claims.UnwrittenConflict``).
    won = select(swapped.c.id).exists()
    rows = (
        select(
            bindparam("a_node", type_=Integer),
            bindparam("a_consumer", type_=String),
            amounts.c.resource_class,
            amounts.c.used,
            bindparam("a_created", type_=_allocations.c.created_at.type),
        )
        .select_from(amounts)
        .where(won)
    )
    columns = ["compute_node_id", "consumer_uuid", "resource_class", "used", "created_at"]
    inserted = (
        insert(_allocations).from_select(columns, rows).returning(_allocations.c.id).cte("inserted")
    )
    placed = placing.where(won).cte("placed")
    # NOTE: every CTE is referenced, or SQLAlchemy leaves it out of the statement.
    return select(
        select(func.count()).select_from(swapped).scalar_subquery(),
        select(func.count()).select_from(placed).scalar_subquery(),
        select(func.count()).select_from(inserted).scalar_subquery(),
    )
