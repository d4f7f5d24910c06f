from __future__ import annotations

import threading
import uuid

import pytest

from compute.claims import ResourceRequest, consumer_allocations, node_capacity, store_usage
from models import ComputeNode
from models.db import session_scope
from models.flavor import FlavorSnapshot
from novaq.exceptions import GenerationConflict, ResourcesUnavailable
from tests.factories import (
    claim,
    make_compute_node,
    make_settings,
    node_row,
    release,
    statements_run,
)


def _uuid() -> str:
    return str(uuid.uuid4())


def test_request_from_flavor_counts_root_ephemeral_and_swap_rounded_up() -> None:
    request = ResourceRequest.from_flavor(
        FlavorSnapshot.load(
            {"vcpus": 2, "memory_mb": 1024, "root_gb": 10, "ephemeral_gb": 5, "swap": 1025}
        )
    )
    assert request == ResourceRequest(vcpus=2, memory_mb=1024, disk_gb=17)


def test_capacity_is_total_minus_reserved_times_ratio(db_url: str) -> None:
    settings = make_settings(
        reserved_host_cpus=2,
        reserved_host_memory_mb=1024,
        reserved_host_disk_mb=10240,
        cpu_allocation_ratio=2.0,
        ram_allocation_ratio=1.5,
    )
    node_id = make_compute_node(db_url, settings=settings, vcpus=8, memory_mb=4096, local_gb=100)
    node = node_row(db_url, node_id)
    assert node_capacity(node) == {"VCPU": 12.0, "MEMORY_MB": 4608.0, "DISK_GB": 90.0}
    assert node.vcpus_used == 2 and node.memory_mb_used == 1024 and node.local_gb_used == 10


def test_new_node_takes_initial_ratios_when_no_ratio_is_set(db_url: str) -> None:
    node = node_row(db_url, make_compute_node(db_url))
    assert (node.cpu_allocation_ratio, node.ram_allocation_ratio, node.disk_allocation_ratio) == (
        4.0,
        1.0,
        1.0,
    )


def test_claim_inserts_allocations_and_bumps_generation(db_url: str) -> None:
    node_id = make_compute_node(db_url)
    before = node_row(db_url, node_id).generation
    consumer = _uuid()
    claim(db_url, node_id, consumer, ResourceRequest(2, 2048, 20))
    node = node_row(db_url, node_id)
    assert node.generation == before + 1
    assert node.vcpus_used == 2
    assert node.memory_mb_used == 512 + 2048
    assert node.local_gb_used == 20
    assert node.free_ram_mb == 32768 - 2560
    with session_scope(db_url) as session:
        assert consumer_allocations(session, consumer) == {
            "VCPU": 2,
            "MEMORY_MB": 2048,
            "DISK_GB": 20,
        }


def test_claim_is_idempotent_for_the_same_consumer(db_url: str) -> None:
    node_id = make_compute_node(db_url)
    consumer = _uuid()
    claim(db_url, node_id, consumer, ResourceRequest(2, 2048, 20))
    generation = node_row(db_url, node_id).generation
    claim(db_url, node_id, consumer, ResourceRequest(2, 2048, 20))
    node = node_row(db_url, node_id)
    assert node.generation == generation
    assert node.vcpus_used == 2


def test_claim_refuses_more_memory_than_free_after_reserved(db_url: str) -> None:
    node_id = make_compute_node(db_url, memory_mb=4096)
    claim(db_url, node_id, _uuid(), ResourceRequest(1, 3000, 1))
    with pytest.raises(ResourcesUnavailable, match="MEMORY_MB requested 1000, free 584"):
        claim(db_url, node_id, _uuid(), ResourceRequest(1, 1000, 1))


def test_claim_allows_vcpu_overcommit_up_to_the_ratio(db_url: str) -> None:
    node_id = make_compute_node(db_url, vcpus=4)  # 4 x 4.0 = 16 vCPUs of capacity
    for _ in range(4):
        claim(db_url, node_id, _uuid(), ResourceRequest(4, 1, 0))
    with pytest.raises(ResourcesUnavailable, match="VCPU"):
        claim(db_url, node_id, _uuid(), ResourceRequest(1, 1, 0))


def test_claim_refuses_a_single_consumer_larger_than_the_node(db_url: str) -> None:
    node_id = make_compute_node(db_url, vcpus=4)
    with pytest.raises(ResourcesUnavailable, match="exceeds the node's total 4"):
        claim(db_url, node_id, _uuid(), ResourceRequest(5, 1, 0))


def test_failed_claim_changes_nothing(db_url: str) -> None:
    node_id = make_compute_node(db_url, memory_mb=1024)
    before = node_row(db_url, node_id)
    consumer = _uuid()
    with pytest.raises(ResourcesUnavailable):
        claim(db_url, node_id, consumer, ResourceRequest(1, 4096, 1))
    after = node_row(db_url, node_id)
    assert (after.generation, after.memory_mb_used) == (before.generation, before.memory_mb_used)
    with session_scope(db_url) as session:
        assert consumer_allocations(session, consumer) == {}


def test_release_returns_usage_to_the_reserved_amounts(db_url: str) -> None:
    node_id = make_compute_node(db_url)
    consumers = [_uuid() for _ in range(3)]
    for consumer in consumers:
        claim(db_url, node_id, consumer, ResourceRequest(1, 1024, 10))
    for consumer in consumers:
        assert release(db_url, consumer) == 3
    assert release(db_url, consumers[0]) == 0
    node = node_row(db_url, node_id)
    assert (node.vcpus_used, node.memory_mb_used, node.local_gb_used) == (0, 512, 0)
    assert node.running_vms == 0


def test_concurrent_claims_from_threads_never_overcommit(db_url: str) -> None:
    # 1 GiB of RAM free after the 512 MB reserved: room for exactly four 256 MB guests.
    node_id = make_compute_node(db_url, memory_mb=1536)
    won: list[str] = []
    lost: list[str] = []

    def worker() -> None:
        consumer = _uuid()
        try:
            claim(db_url, node_id, consumer, ResourceRequest(1, 256, 0))
            won.append(consumer)
        except ResourcesUnavailable:
            lost.append(consumer)

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(won) == 4 and len(lost) == 8
    assert node_row(db_url, node_id).memory_mb_used == 512 + 4 * 256


def test_a_consumer_claiming_anew_on_its_node_is_counted_without_its_old_claim(
    db_url: str,
) -> None:
    node_id = make_compute_node(db_url, memory_mb=4096)  # 3584 MB of room
    consumer = _uuid()
    claim(db_url, node_id, consumer, ResourceRequest(1, 3000, 1))
    claim(db_url, node_id, consumer, ResourceRequest(2, 3500, 2))  # fits once 3000 is gone
    node = node_row(db_url, node_id)
    assert (node.vcpus_used, node.memory_mb_used, node.local_gb_used) == (2, 512 + 3500, 2)
    with session_scope(db_url) as session:
        assert consumer_allocations(session, consumer) == {
            "VCPU": 2,
            "MEMORY_MB": 3500,
            "DISK_GB": 2,
        }


def test_a_claim_takes_three_statements(db_url: str) -> None:
    """One read of the node, what the consumer holds and what the node uses, one INSERT
    of the allocations, then the compare-and-swap of the usage read plus the claim's."""
    node_id = make_compute_node(db_url)
    claim(db_url, node_id, _uuid(), ResourceRequest(1, 512, 1))  # another consumer there
    with statements_run(db_url) as statements:
        claim(db_url, node_id, _uuid(), ResourceRequest(2, 1024, 2))
    assert [s.split()[0] for s in statements] == ["SELECT", "INSERT", "UPDATE"]
    node = node_row(db_url, node_id)
    assert (node.vcpus_used, node.memory_mb_used, node.local_gb_used) == (3, 512 + 1536, 3)
    assert (node.free_ram_mb, node.free_disk_gb, node.running_vms) == (
        node.memory_mb - 512 - 1536,
        node.local_gb - 3,
        2,
    )


def test_a_claim_again_with_another_request_rewrites_the_usage_from_the_allocations(
    db_url: str,
) -> None:
    node_id = make_compute_node(db_url)
    consumer = _uuid()
    claim(db_url, node_id, _uuid(), ResourceRequest(1, 512, 1))
    claim(db_url, node_id, consumer, ResourceRequest(2, 1024, 2))
    claim(db_url, node_id, consumer, ResourceRequest(4, 2048, 0))  # a redelivered resize
    node = node_row(db_url, node_id)
    assert (node.vcpus_used, node.memory_mb_used, node.local_gb_used) == (5, 512 + 2560, 1)
    assert node.running_vms == 2


def test_store_usage_writes_only_usage_that_differs_and_then_swaps_the_generation(
    db_url: str,
) -> None:
    node_id = make_compute_node(db_url)  # 512 MB reserved, nothing allocated
    usage = {"VCPU": 0, "MEMORY_MB": 0, "DISK_GB": 0}
    with session_scope(db_url) as session, statements_run(db_url) as statements:
        node = session.get(ComputeNode, node_id)
        assert node is not None
        assert store_usage(session, node, node.generation, usage, 0) is False
    assert statements == [s for s in statements if s.startswith("SELECT")]
    generation = node_row(db_url, node_id).generation
    with session_scope(db_url) as session:
        node = session.get(ComputeNode, node_id)
        assert node is not None
        used = {"VCPU": 2, "MEMORY_MB": 1024, "DISK_GB": 3}
        assert store_usage(session, node, generation, used, 1) is True
        assert (node.memory_mb_used, node.generation) == (512 + 1024, generation + 1)
    node = node_row(db_url, node_id)
    assert (node.vcpus_used, node.memory_mb_used, node.local_gb_used) == (2, 1536, 3)
    assert (node.free_ram_mb, node.running_vms, node.generation) == (
        node.memory_mb - 1536,
        1,
        generation + 1,
    )


def test_store_usage_after_a_claim_meanwhile_is_a_generation_conflict(db_url: str) -> None:
    node_id = make_compute_node(db_url)
    with session_scope(db_url) as session:
        node = session.get(ComputeNode, node_id)
        assert node is not None
        generation = node.generation
    claim(db_url, node_id, _uuid(), ResourceRequest(1, 512, 1))
    with pytest.raises(GenerationConflict), session_scope(db_url) as session:
        node = session.get(ComputeNode, node_id)
        assert node is not None
        store_usage(session, node, generation, {"VCPU": 1, "MEMORY_MB": 0, "DISK_GB": 0}, 1)
