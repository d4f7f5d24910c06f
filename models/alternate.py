"""``Alternate``: a compute node a build or a move may go to next if its destination fails
(Nova's alternate hosts in a ``Selection``), named as the claim needs it.

It sits in the data layer because the scheduler produces it and compute consumes it, and
compute never imports the scheduler. One type on every path: the scheduler, the task
arguments (JSON lists on the wire, through ``dump_alternates``/``load_alternates`` only)
and the reschedule loops.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple


class Alternate(NamedTuple):
    host: str
    nodename: str
    compute_node_id: int

    @classmethod
    def load(cls, data: Sequence[Any]) -> Alternate:
        host, nodename, compute_node_id = data
        return cls(str(host), str(nodename), int(compute_node_id))


def load_alternates(data: Iterable[Sequence[Any]] | None) -> tuple[Alternate, ...]:
    """Alternates from their wire form (a JSON list of ``[host, node, id]``) or any
    sequence of triples; None is none."""
    return tuple(Alternate.load(a) for a in data or ())


def dump_alternates(alternates: Iterable[Sequence[Any]]) -> list[list[Any]]:
    """The wire form of alternates: JSON lists ``[host, node, id]``, as the tasks take them."""
    return [list(Alternate.load(a)) for a in alternates]
