from __future__ import annotations

import uuid as uuid_module

import pytest

from compute.claims import (
    ResourceRequest,
    confirm_move,
    consumer_allocations,
    move_claim,
    retry_on_conflict,
    revert_move,
)
from compute.pci import PciRequest, held_devices, sync_devices
from compute.sessions import sessions_for
from models.db import session_scope
from novaq.exceptions import ResourcesUnavailable
from tests.factories import GPU_ALIAS, claim, gpu_settings, gpus, make_compute_node, node_row

OLD = ResourceRequest(2, 2048, 10)
NEW = ResourceRequest(4, 4096, 20)


def _ids() -> tuple[str, str]:
    return str(uuid_module.uuid4()), str(uuid_module.uuid4())


def _held(db_url: str, consumer: str, node_id: int | None = None) -> dict[str, int]:
    with session_scope(db_url) as session:
        return consumer_allocations(session, consumer, node_id)


def _resize(
    db_url: str, instance: str, migration: str, src: int, dst: int, new: ResourceRequest = NEW
) -> None:
    retry_on_conflict(
        sessions_for(db_url), lambda s: move_claim(s, instance, migration, src, dst, new)
    )


def test_resize_claim_moves_the_source_to_the_migration_and_claims_the_destination(
    db_url: str,
) -> None:
    src, dst = make_compute_node(db_url, "src"), make_compute_node(db_url, "dst")
    instance, migration = _ids()
    claim(db_url, src, instance, OLD)
    _resize(db_url, instance, migration, src, dst)
    assert _held(db_url, migration, src) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10}
    assert _held(db_url, instance, src) == {}
    assert _held(db_url, instance, dst) == {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 20}
    assert node_row(db_url, src).vcpus_used == 2 and node_row(db_url, dst).vcpus_used == 4


def test_confirm_frees_the_source(db_url: str) -> None:
    src, dst = make_compute_node(db_url, "src"), make_compute_node(db_url, "dst")
    instance, migration = _ids()
    claim(db_url, src, instance, OLD)
    _resize(db_url, instance, migration, src, dst)
    retry_on_conflict(sessions_for(db_url), lambda s: confirm_move(s, migration, src))
    assert node_row(db_url, src).vcpus_used == 0
    assert _held(db_url, migration) == {}
    assert _held(db_url, instance) == {"VCPU": 4, "MEMORY_MB": 4096, "DISK_GB": 20}


def test_revert_frees_the_destination_and_gives_the_source_back(db_url: str) -> None:
    src, dst = make_compute_node(db_url, "src"), make_compute_node(db_url, "dst")
    instance, migration = _ids()
    claim(db_url, src, instance, OLD)
    _resize(db_url, instance, migration, src, dst)
    retry_on_conflict(sessions_for(db_url), lambda s: revert_move(s, instance, migration, src, dst))
    assert node_row(db_url, dst).vcpus_used == 0
    assert _held(db_url, instance) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10}
    assert _held(db_url, migration) == {}


def test_same_host_resize_holds_both_flavors_on_one_node(db_url: str) -> None:
    node = make_compute_node(db_url, "only")
    instance, migration = _ids()
    claim(db_url, node, instance, OLD)
    _resize(db_url, instance, migration, node, node)
    assert node_row(db_url, node).vcpus_used == 6


def test_a_resize_that_does_not_fit_changes_nothing(db_url: str) -> None:
    src, dst = make_compute_node(db_url, "src"), make_compute_node(db_url, "dst", memory_mb=2048)
    instance, migration = _ids()
    claim(db_url, src, instance, OLD)
    with pytest.raises(ResourcesUnavailable):
        _resize(db_url, instance, migration, src, dst)
    assert _held(db_url, instance, src) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 10}
    assert _held(db_url, migration) == {}


def test_gpu_resize_one_to_two_claims_two_new_devices_and_the_migration_keeps_the_old(
    db_url: str,
) -> None:
    settings = gpu_settings()
    src = make_compute_node(db_url, "src", settings=settings)
    dst = make_compute_node(db_url, "dst", settings=settings)
    with session_scope(db_url) as session:
        sync_devices(session, src, gpus("0000:08:00.0"), settings)
        sync_devices(session, dst, gpus("0000:08:00.0", "0000:88:00.0"), settings)
    one = ResourceRequest(8, 32768 // 4, 10, pci=(PciRequest(GPU_ALIAS, 1, "10de", "13f1"),))
    two = ResourceRequest(16, 65536 // 8, 10, pci=(PciRequest(GPU_ALIAS, 2, "10de", "13f1"),))
    instance, migration = _ids()
    claim(db_url, src, instance, one)
    _resize(db_url, instance, migration, src, dst, new=two)
    with session_scope(db_url) as session:
        assert [d.address for d in held_devices(session, instance, dst)] == [
            "0000:08:00.0",
            "0000:88:00.0",
        ]
        assert [d.address for d in held_devices(session, migration, src)] == ["0000:08:00.0"]
        assert {d.instance_uuid for d in held_devices(session, migration)} == {instance}
