"""The resource audit's steady state (``compute.steady_usage``): it must
say "steady" only when the heal would change nothing, and then give the usage the heal
would write; anything else is left to the heal."""

from __future__ import annotations

import json
import uuid as uuid_module
from collections.abc import Callable, Mapping

from sqlalchemy import func, select, update
from sqlalchemy.dialects import mysql

from compute.claims import ResourceRequest, allocation_usage
from compute.heal import Domain, heal_node
from compute.steady_usage import (
    _holding_their_flavors,
    _read_groups,
    _steady_query,
    steady_usage,
)
from models import Allocation, ComputeNode, PciDevice
from models.db import session_scope
from models.pci_device import CLAIMED
from tests.factories import (
    claim,
    flavor_dict,
    make_compute_node,
    make_instance,
    make_migration,
    rolled_back,
    statements_run,
)

Verdict = tuple[tuple[dict[str, int], int] | None, list[str]]


def _live(db_url: str, **flavor: int) -> str:
    return make_instance(
        db_url,
        flavor_dict(**flavor) if flavor else None,
        vm_state="active",
        task_state=None,
        host="host1",
        node="host1",
    )


def _verdict(
    db_url: str,
    domains: Mapping[str, Domain] | None = None,
    guest_exists: Callable[[str], bool] | None = lambda _uuid: True,
) -> Verdict:
    """What ``steady_usage`` says of host1's node, and what the heal then does in the same
    transaction (rolled back). Steady must mean: the heal does nothing, and the usage and
    consumers are the allocations'."""
    domains = domains or {}
    with rolled_back(db_url) as session:
        node = session.scalars(select(ComputeNode).where(ComputeNode.host == "host1")).one()
        steady = steady_usage(session, node, domains, guest_exists)
        usage = allocation_usage(session, node.id)
        holders = session.scalar(
            select(func.count(func.distinct(Allocation.consumer_uuid))).where(
                Allocation.compute_node_id == node.id
            )
        )
        heals = [h.action for h in heal_node(session, node, domains, guest_exists)]
    if steady is not None:
        assert heals == []
        assert steady == (usage, holders)
    return steady, heals


def _node(db_url: str) -> int:
    return make_compute_node(db_url, "host1", vcpus=64, memory_mb=65536, local_gb=1000)


def test_instances_holding_their_flavors_are_steady(db_url: str) -> None:
    node = _node(db_url)
    small = [_live(db_url) for _ in range(3)]
    large = _live(db_url, vcpus=4, memory_mb=2048, root_gb=10)
    for uuid in small:
        claim(db_url, node, uuid, ResourceRequest(1, 512, 1))
    claim(db_url, node, large, ResourceRequest(4, 2048, 10))
    domains = {u: Domain(u, 1, 512) for u in small}
    steady, _ = _verdict(db_url, domains)
    assert steady == ({"VCPU": 7, "MEMORY_MB": 3584, "DISK_GB": 13}, 4)


def test_an_empty_node_is_steady(db_url: str) -> None:
    _node(db_url)
    assert _verdict(db_url) == (({"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}, 0), [])


def test_a_wrong_amount_is_the_heals(db_url: str) -> None:
    node = _node(db_url)
    uuid = _live(db_url)
    claim(db_url, node, uuid, ResourceRequest(2, 512, 1))
    assert _verdict(db_url) == (None, ["corrected"])


def test_a_missing_allocation_is_the_heals(db_url: str) -> None:
    node = _node(db_url)
    claim(db_url, node, _live(db_url), ResourceRequest(1, 512, 1))
    _live(db_url)
    assert _verdict(db_url) == (None, ["recreated"])


def test_a_class_the_flavor_does_not_hold_is_the_heals(db_url: str) -> None:
    node = _node(db_url)
    uuid = _live(db_url, root_gb=0)
    claim(db_url, node, uuid, ResourceRequest(1, 512, 1))  # DISK_GB 1, the flavor none
    assert _verdict(db_url) == (None, ["corrected"])


def test_an_allocation_of_a_consumer_that_is_not_counted_is_the_heals(db_url: str) -> None:
    node = _node(db_url)
    claim(db_url, node, _live(db_url), ResourceRequest(1, 512, 1))
    gone = make_instance(db_url, vm_state="deleted", deleted=1, host="host1", node="host1")
    claim(db_url, node, gone, ResourceRequest(1, 512, 1))
    assert _verdict(db_url) == (None, ["removed"])


def test_an_unknown_guest_still_there_is_the_heals_and_a_foreign_one_is_not(
    db_url: str,
) -> None:
    _node(db_url)
    orphan = str(uuid_module.uuid4())
    domains = {orphan: Domain(orphan, 2, 1024)}
    assert _verdict(db_url, domains) == (None, ["orphan_counted"])
    assert _verdict(db_url, domains, guest_exists=lambda _u: False)[1] == []
    assert _verdict(db_url, domains, guest_exists=lambda _u: False)[0] is not None
    assert _verdict(db_url, domains, guest_exists=None) == (None, ["orphan_counted"])


def test_a_foreign_guest_costs_no_statement_and_one_of_ours_is_looked_up(db_url: str) -> None:
    """The hypervisor is asked first: a guest that is not ours is never an orphan to count,
    so a node whose only unknown guests are foreign needs no lookup of them; one of ours
    still does (it may be a live instance of another node, mid-move)."""
    _node(db_url)
    stranger = str(uuid_module.uuid4())
    domains = {stranger: Domain(stranger, 2, 1024)}
    asked: list[str] = []

    def ours(uuid: str) -> bool:
        asked.append(uuid)
        return False

    def statements_for(guest_exists: Callable[[str], bool]) -> list[str]:
        with rolled_back(db_url) as session:
            node = session.scalars(select(ComputeNode).where(ComputeNode.host == "host1")).one()
            with statements_run(db_url) as statements:
                steady_usage(session, node, domains, guest_exists)
        return statements

    foreign = statements_for(ours)
    assert asked == [stranger]
    assert len(foreign) == 1  # the grouped read alone
    looked_up = statements_for(lambda _u: True)
    assert looked_up[:1] == foreign and len(looked_up) == 2
    assert "instances.uuid IN" in looked_up[1]


def test_a_guest_of_a_live_instance_elsewhere_is_not_an_orphan(db_url: str) -> None:
    _node(db_url)
    elsewhere = make_instance(db_url, vm_state="active", task_state=None, host="host2")
    steady, heals = _verdict(db_url, {elsewhere: Domain(elsewhere, 1, 512)})
    assert steady is not None and heals == []


def test_a_counted_orphan_is_left_to_the_heal_which_keeps_it(db_url: str) -> None:
    _node(db_url)
    orphan = str(uuid_module.uuid4())
    domains = {orphan: Domain(orphan, 2, 1024)}
    with session_scope(db_url) as session:
        node = session.scalars(select(ComputeNode).where(ComputeNode.host == "host1")).one()
        assert [h.action for h in heal_node(session, node, domains)] == ["orphan_counted"]
    assert _verdict(db_url, domains) == (None, [])


def test_moves_in_flight_are_the_heals(db_url: str) -> None:
    node = _node(db_url)
    for _ in range(2):
        uuid = _live(db_url)
        claim(db_url, node, uuid, ResourceRequest(1, 512, 1))
        make_migration(db_url, uuid, status="migrating", dest_compute="host2")
    with rolled_back(db_url) as session:
        row = session.scalars(select(ComputeNode).where(ComputeNode.id == node)).one()
        assert steady_usage(session, row, {}) is None


def test_a_device_busy_for_a_consumer_that_is_not_counted_is_the_heals(db_url: str) -> None:
    node = _node(db_url)
    claim(db_url, node, _live(db_url), ResourceRequest(1, 512, 1))
    gone = str(uuid_module.uuid4())
    with session_scope(db_url) as session:
        session.add(
            PciDevice(
                compute_node_id=node,
                address="0000:08:00.0",
                vendor_id="10de",
                product_id="13f1",
                dev_type="type-PCI",
                status=CLAIMED,
                instance_uuid=gone,
                consumer_uuid=gone,
            )
        )
    assert _verdict(db_url) == (None, ["pci_freed"])


def test_a_device_busy_for_a_counted_instance_is_steady(db_url: str) -> None:
    node = _node(db_url)
    uuid = _live(db_url)
    claim(db_url, node, uuid, ResourceRequest(1, 512, 1))
    with session_scope(db_url) as session:
        session.add(
            PciDevice(
                compute_node_id=node,
                address="0000:08:00.0",
                vendor_id="10de",
                product_id="13f1",
                dev_type="type-PCI",
                status=CLAIMED,
                instance_uuid=uuid,
                consumer_uuid=uuid,
            )
        )
    steady, heals = _verdict(db_url)
    assert steady is not None and heals == []


def test_a_flavor_that_holds_nothing_is_the_heals(db_url: str) -> None:
    """The heal records such a consumer (``recreated``, nothing) on every pass."""
    _node(db_url)
    _live(db_url, vcpus=0, memory_mb=0, root_gb=0)
    assert _verdict(db_url) == (None, ["recreated"])


def test_the_usage_columns_are_not_what_the_verdict_reads(db_url: str) -> None:
    """Stale derived columns do not make the allocations wrong: steady, and the caller
    rewrites them (``compute.claims.store_usage``)."""
    node = _node(db_url)
    claim(db_url, node, _live(db_url), ResourceRequest(1, 512, 1))
    with session_scope(db_url) as session:
        session.execute(update(ComputeNode).where(ComputeNode.id == node).values(vcpus_used=9))
    steady, heals = _verdict(db_url)
    assert steady == ({"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}, 1) and heals == []


def test_groups_of_one_uuid_each_as_on_mysql_add_up() -> None:
    """MySQL/MariaDB's ``GROUP_CONCAT`` is cut at 1,024 bytes: there the statement
    groups by uuid too, and the groups of one (class, amount) are read together."""
    query = str(_steady_query("mysql").compile(dialect=mysql.dialect()))
    assert "GROUP BY" in query and "group_concat" not in query.lower()
    flavor = json.dumps(flavor_dict())
    rows = [
        ("n", None, None, None, 0, None),
        *(("i", flavor, None, None, 1, uuid) for uuid in ("u1", "u2")),
        *(
            ("a", rc, None, amount, 1, uuid)
            for rc, amount in (("VCPU", 1), ("MEMORY_MB", 512), ("DISK_GB", 1))
            for uuid in ("u1", "u2")
        ),
    ]
    read = _read_groups(rows)
    assert read is not None
    usage, instances, holding, node_rows = read
    assert usage == {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 2} and node_rows == 6
    assert _holding_their_flavors(instances, holding, node_rows) == {"u1", "u2"}
    assert _holding_their_flavors(instances, holding, node_rows + 1) is None
