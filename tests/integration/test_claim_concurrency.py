"""Claims made at the same moment by many processes on real PostgreSQL never overcommit."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, func, select

from compute.claims import node_capacity
from models import Allocation, ComputeNode, Service
from models.db import session_scope
from tests.factories import make_compute_node, make_settings
from tests.integration.claim_worker import claim_many

pytestmark = pytest.mark.integration

PROCESSES, ATTEMPTS = 8, 12


@pytest.fixture
def race_node(services: str) -> Iterator[int]:
    # 4096 MB free after the 512 MB reserved: room for exactly sixteen 256 MB claims.
    node_id = make_compute_node(services, "race", settings=make_settings(), memory_mb=4608)
    yield node_id
    with session_scope(services) as session:
        session.execute(delete(Allocation).where(Allocation.compute_node_id == node_id))
        session.execute(delete(ComputeNode).where(ComputeNode.id == node_id))
        session.execute(delete(Service).where(Service.host == "race"))


def test_many_processes_claiming_one_node_never_exceed_its_capacity(
    services: str, race_node: int
) -> None:
    with session_scope(services) as session:
        node = session.get(ComputeNode, race_node)
        assert node is not None
        start_generation, capacity = node.generation, node_capacity(node)["MEMORY_MB"]
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(claim_many, [(services, race_node, ATTEMPTS)] * PROCESSES)
    winners = [c for won in results for c in won]
    assert len(winners) == len(set(winners)) == 16
    with session_scope(services) as session:
        node = session.get(ComputeNode, race_node)
        assert node is not None
        used = session.scalar(
            select(func.sum(Allocation.used)).where(
                Allocation.compute_node_id == race_node, Allocation.resource_class == "MEMORY_MB"
            )
        )
        assert used == 16 * 256 <= capacity
        assert node.memory_mb_used == 512 + used
        assert node.generation == start_generation + 16
