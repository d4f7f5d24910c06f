"""The resource audit's steady state: a node whose allocations are exactly what its
instances should hold, with nothing for the heal (``compute.heal``) to do, recognised
from one grouped statement instead of the heal's reads of every row.

``update_available_resource`` runs on every host every minute, and nearly always finds
the steady state; anything else (a move in flight, a leak, an orphan guest, a device busy
for another consumer) is left to the heal, which reads and corrects it as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import (
    CompoundSelect,
    Integer,
    Select,
    String,
    Text,
    bindparam,
    cast,
    func,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy.orm import Session

from compute.heal import Domain, live_among
from compute.usage import counted_instances, node_moves, stored_request
from models import Allocation, ComputeNode, Instance, PciDevice
from models.allocation import RESOURCE_CLASSES
from models.pci_device import ALLOCATED, CLAIMED


def steady_usage(
    session: Session,
    node: ComputeNode,
    domains: Mapping[str, Domain],
    guest_exists: Callable[[str], bool] | None = None,
) -> tuple[dict[str, int], int] | None:
    """The node's usage by its allocations and how many consumers hold them, when a heal
    (``compute.heal.heal_node`` with the same arguments) would change nothing; None when
    it might. The audit's steady state, from one grouped statement instead of the heal's
    reads (one snapshot: a claim committing meanwhile is seen whole or not at all).

    Steady means: no move in flight on the node nor evacuation done from it, every
    allocation held by a counted instance (``compute.usage.counted_instances``) and every
    such instance holding its flavor exactly, no device busy for anyone else, and no
    guest of ``domains`` that the heal would count as an orphan (neither a counted nor a
    live instance, and still there: ``guest_exists``). Anything else is the heal's."""
    session.flush()  # what the ORM would do before its own query
    params = {"host": node.host, "nodename": node.hypervisor_hostname, "node": node.id}
    dialect = session.get_bind().dialect.name
    # On the connection, all at once, as the heal's reads (compute.heal.node_allocations).
    rows = session.connection().execute(_steady_query(dialect), params).all()
    read = _read_groups(rows)
    if read is None:
        return None
    usage, instances, holding, node_rows = read
    known = _holding_their_flavors(instances, holding, node_rows)
    if known is None or _orphans_to_count(session, domains, known, guest_exists):
        return None
    return usage, len(known)


#: ``_steady_query``'s groups as ``steady_usage`` reads them: the node's usage, each
#: instance group's rows (``_holds``) and uuids, each allocation group's consumers by
#: (resource class, amount), and the node's number of allocation rows.
_Groups = tuple[
    dict[str, int],
    list[tuple[tuple[tuple[str, int], ...] | None, list[str]]],
    dict[tuple[str, int], set[str]],
    int,
]


def _read_groups(rows: Sequence[Any]) -> _Groups | None:
    """``_steady_query``'s rows; None if the node has a move or a device busy for a
    consumer that is not counted."""
    usage = dict.fromkeys(RESOURCE_CLASSES, 0)
    instances: list[tuple[tuple[tuple[str, int], ...] | None, list[str]]] = []
    holding: dict[tuple[str, int], set[str]] = {}
    node_rows = 0
    for kind, key, pci, amount, count, uuids in rows:
        if kind == "n":
            if count:
                return None
            continue
        members = uuids.split(",") if count > 1 else [uuids]
        if kind == "i":
            instances.append((_holds(key, pci), members))
        else:
            holding.setdefault((key, amount), set()).update(members)  # MySQL: one each
            usage[key] = usage.get(key, 0) + count * amount
            node_rows += count
    return usage, instances, holding, node_rows


def _holding_their_flavors(
    instances: list[tuple[tuple[tuple[str, int], ...] | None, list[str]]],
    holding: Mapping[tuple[str, int], set[str]],
    node_rows: int,
) -> set[str] | None:
    """The counted instances' uuids if each holds exactly its flavor's allocation rows
    and no other row is on the node; else None."""
    known: set[str] = set()
    rows_held = 0
    for held, members in instances:
        if held is None:
            return None
        for rc_amount in held:
            if not holding.get(rc_amount, _NOBODY).issuperset(members):
                return None  # an instance without its flavor's allocation of a class
        rows_held += len(held) * len(members)
        known.update(members)
    # The rows each instance must hold are all there: any other row (a class its flavor
    # does not hold, a consumer that is not counted) makes the node hold more.
    return known if rows_held == node_rows else None


def _orphans_to_count(
    session: Session,
    domains: Mapping[str, Domain],
    known: set[str],
    guest_exists: Callable[[str], bool] | None,
) -> bool:
    """Whether the heal would count a guest as an orphan: not a counted instance, not a
    live one elsewhere (``compute.heal.orphan_domains``), still there (``NodeHealer.run``)."""
    candidates = [uuid for uuid in domains if uuid not in known]
    if guest_exists is not None:
        # NOTE: the hypervisor first: a guest that is not ours (another tool's, libvirt's
        # test domain) is never an orphan to count, and the heal would ask about each
        # such guest anyway; only ours are looked up, so a host whose only unknown
        # guests are foreign costs no statement (issue 16: about 1 ms an audit).
        candidates = [uuid for uuid in candidates if guest_exists(uuid)]
    if not candidates:
        return False
    live = live_among(session, candidates)
    return any(uuid not in live for uuid in candidates)


_NOBODY: frozenset[str] = frozenset()


@functools.lru_cache(maxsize=256)
def _holds(flavor_json: str, pci_json: str | None) -> tuple[tuple[str, int], ...] | None:
    """The allocation rows an instance of this stored flavor holds: (resource class,
    amount) of each class it holds. None for a flavor that holds nothing (the heal
    records such a consumer on every pass: not steady)."""
    resources = stored_request(flavor_json, pci_json).as_resources()
    return tuple((rc, n) for rc, n in resources.items() if n) or None


@functools.cache
def _steady_query(dialect: str) -> CompoundSelect[Any]:
    """``steady_usage``'s statement (parameters ``host``, ``nodename``, ``node``), rows of
    (kind, key, PCI requests, amount, count, uuids):

    - ``i``: the counted instances grouped by stored flavor (key) and PCI requests;
    - ``a``: the node's allocation rows grouped by resource class (key) and amount;
    - ``n``, one row: how many moves and devices busy for others the node has (count).

    Each group's uuids are joined by commas; on MySQL/MariaDB, whose ``GROUP_CONCAT`` is
    cut at 1,024 bytes by default, a group is one uuid. NOTE: instances and allocations
    are matched in Python, not joined: without statistics (a table just filled)
    PostgreSQL joined them by nested loops that scanned every allocation of the node for
    each instance (0.6 s for 1,000 guests); a read of each table alone has one plan."""
    host = bindparam("host", type_=String)
    nodename = bindparam("nodename", type_=String)
    node = bindparam("node", type_=Integer)
    counted = counted_instances(host, nodename)
    one_each = dialect in ("mysql", "mariadb")

    def grouped(kind: str, key: Any, pci: Any, amount: Any, uuid: Any) -> Select[Any]:
        uuids = func.min(uuid) if one_each else func.aggregate_strings(uuid, ",")
        by = (key, *(c for c in (pci, amount) if c is not None), *((uuid,) if one_each else ()))
        # NOTE: typed NULLs: PostgreSQL takes a UNION column's type from its first branch.
        return select(
            literal_column(f"'{kind}'"),
            key,
            cast(null(), Text) if pci is None else pci,
            cast(null(), Integer) if amount is None else amount,
            func.count(),
            uuids,
        ).group_by(*by)

    flavor = cast(Instance.flavor, Text)
    pci = cast(Instance.request_spec["pci_requests"], Text)
    instances = grouped("i", flavor, pci, None, Instance.uuid).where(*counted)
    a = Allocation.__table__.c
    allocations = grouped("a", a.resource_class, None, a.used, a.consumer_uuid).where(
        a.compute_node_id == node
    )
    moves = select(func.count()).where(node_moves(host, nodename))
    busy = select(func.count()).where(
        PciDevice.compute_node_id == node,
        PciDevice.status.in_((CLAIMED, ALLOCATED)),
        PciDevice.deleted == 0,
        PciDevice.consumer_uuid.is_not(None),
        PciDevice.consumer_uuid.not_in(select(Instance.uuid).where(*counted)),
    )
    elsewhere = select(
        literal_column("'n'"),
        cast(null(), Text),
        cast(null(), Text),
        cast(null(), Integer),
        moves.scalar_subquery() + busy.scalar_subquery(),
        cast(null(), Text),
    )
    return union_all(elsewhere, instances, allocations)
