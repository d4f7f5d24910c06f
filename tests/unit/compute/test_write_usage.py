"""``claims.write_usage``: a node's derived usage rewritten from its allocations in one
UPDATE (the sums and the count of distinct consumers computed by the statement), under
its generation compare-and-swap, on SQLite and on PostgreSQL (skipped when no
PostgreSQL listens on 127.0.0.1:5432)."""

from __future__ import annotations

import uuid

import pytest

from compute.claims import ResourceRequest, write_usage
from models import Allocation, ComputeNode
from models.db import session_scope
from novaq.exceptions import GenerationConflict
from tests.factories import claim, make_compute_node, node_row, statements_run


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest) -> str:
    name = "db_url" if request.param == "sqlite" else "migrated_pg_url"
    return str(request.getfixturevalue(name))


def _rewrite(url: str, node_id: int) -> tuple[int, list[str]]:
    with session_scope(url) as session, statements_run(url) as statements:
        node = session.get(ComputeNode, node_id)
        assert node is not None
        generation = node.generation
        statements.clear()  # the node's load above
        assert write_usage(session, node, generation) == generation + 1
    return generation, statements


def test_the_usage_is_summed_from_the_allocations_in_one_statement(url: str) -> None:
    node_id = make_compute_node(url, vcpus=8, memory_mb=8192, local_gb=100)  # 512 MB reserved
    consumer, other = str(uuid.uuid4()), str(uuid.uuid4())
    claim(url, node_id, consumer, ResourceRequest(vcpus=2, memory_mb=1024, disk_gb=10))
    claim(url, node_id, other, ResourceRequest(vcpus=1, memory_mb=256, disk_gb=0))
    with session_scope(url) as session:  # behind the columns' back: the next rewrite sees it
        session.add(
            Allocation(
                compute_node_id=node_id, consumer_uuid=other, resource_class="DISK_GB", used=5
            )
        )
    generation, statements = _rewrite(url, node_id)
    assert len(statements) == 1 and statements[0].startswith("UPDATE compute_nodes")
    node = node_row(url, node_id)
    assert (node.vcpus_used, node.memory_mb_used, node.local_gb_used) == (3, 512 + 1280, 15)
    assert (node.free_ram_mb, node.free_disk_gb) == (8192 - 1792, 100 - 15)
    assert (node.running_vms, node.generation) == (2, generation + 1)


def test_a_node_with_no_allocations_is_back_to_its_reserved_amounts(url: str) -> None:
    node_id = make_compute_node(url, vcpus=8, memory_mb=8192, local_gb=100)
    with session_scope(url) as session:
        session.get(ComputeNode, node_id).vcpus_used = 7  # type: ignore[union-attr]
    generation, _ = _rewrite(url, node_id)
    node = node_row(url, node_id)
    assert (node.vcpus_used, node.memory_mb_used, node.local_gb_used) == (0, 512, 0)
    assert (node.free_ram_mb, node.free_disk_gb, node.running_vms) == (8192 - 512, 100, 0)
    assert node.generation == generation + 1


def test_a_generation_bumped_meanwhile_is_a_conflict_and_writes_nothing(url: str) -> None:
    node_id = make_compute_node(url, vcpus=8, memory_mb=8192, local_gb=100)
    stale = node_row(url, node_id).generation
    claim(url, node_id, str(uuid.uuid4()), ResourceRequest(vcpus=1, memory_mb=512, disk_gb=1))
    before = node_row(url, node_id)
    with pytest.raises(GenerationConflict), session_scope(url) as session:
        node = session.get(ComputeNode, node_id)
        assert node is not None
        write_usage(session, node, stale)
    after = node_row(url, node_id)
    assert (after.generation, after.vcpus_used, after.running_vms) == (
        before.generation,
        before.vcpus_used,
        before.running_vms,
    )
