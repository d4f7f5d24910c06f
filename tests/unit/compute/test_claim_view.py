"""What a claim reads before it writes (``compute.claims._claim_view``): one row, the same
facts the grouped read gave (the node's usage by class, what the consumer holds there by
class, its devices, the distinct consumers)."""

from __future__ import annotations

import uuid

from sqlalchemy import insert

from compute.claims import ResourceRequest, _claim_view
from models import Allocation
from models.db import session_scope
from tests.factories import claim, make_compute_node


def _uuid() -> str:
    return str(uuid.uuid4())


def test_the_view_sums_the_node_and_the_consumer_by_class(db_url: str) -> None:
    node_id = make_compute_node(db_url)
    other_node = make_compute_node(db_url, host="host2")
    mine, theirs = _uuid(), _uuid()
    claim(db_url, node_id, theirs, ResourceRequest(1, 512, 1))
    claim(db_url, node_id, mine, ResourceRequest(2, 1024, 0))  # no DISK_GB row
    claim(db_url, other_node, mine, ResourceRequest(8, 4096, 8))  # another node's
    with session_scope(db_url) as session:
        view = _claim_view(session, mine, node_id)
        assert view.node is not None and view.node.id == node_id
        assert view.usage == {"VCPU": 3, "MEMORY_MB": 1536, "DISK_GB": 1}
        assert view.held == {"VCPU": 2, "MEMORY_MB": 1024}
        assert (view.devices, view.consumers) == (0, 2)
        fresh = _claim_view(session, _uuid(), node_id)
        assert (fresh.held, fresh.usage["VCPU"], fresh.consumers) == ({}, 3, 2)


def test_a_class_held_at_zero_or_outside_novaqs_classes_is_held(db_url: str) -> None:
    """A row is held whatever its amount: the claim is then not fresh, and replaces it."""
    node_id = make_compute_node(db_url)
    consumer = _uuid()
    with session_scope(db_url) as session:
        rows = [("VCPU", 0), ("CUSTOM_THING", 3)]
        session.execute(
            insert(Allocation),
            [
                dict(compute_node_id=node_id, consumer_uuid=consumer, resource_class=rc, used=n)
                for rc, n in rows
            ],
        )
    with session_scope(db_url) as session:
        view = _claim_view(session, consumer, node_id)
        assert view.held == {"VCPU": 0, "#other": 1}
        assert view.usage == {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}
        assert view.consumers == 1
    claim(db_url, node_id, consumer, ResourceRequest(1, 512, 1))  # replaces both rows
    with session_scope(db_url) as session:
        view = _claim_view(session, consumer, node_id)
        assert view.held == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


def test_a_node_that_does_not_exist_has_no_view(db_url: str) -> None:
    with session_scope(db_url) as session:
        view = _claim_view(session, _uuid(), 987654)
    assert view.node is None and view.held == {} and view.consumers == 0
