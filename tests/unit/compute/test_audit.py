from __future__ import annotations

import uuid as uuid_module
from typing import Any

from sqlalchemy import update

from compute.audit import audit_nodes
from compute.claims import ResourceRequest
from compute.resource_tracker import update_available_resource
from compute.sessions import sessions_for
from models import Allocation, ComputeNode
from models.db import session_scope
from tests.factories import claim, host_resources, make_instance, make_settings
from virt.driver import GuestSpec
from virt.fake import FakeDriver


def _setup(db_url: str, **settings: Any) -> tuple[FakeDriver, int]:
    driver = FakeDriver(host_resources("host1"))
    update_available_resource(sessions_for(db_url), driver, "host1", make_settings(**settings))
    with session_scope(db_url) as session:
        node_id = session.query(ComputeNode.id).filter_by(host="host1").scalar()
    return driver, node_id


def _view(driver: FakeDriver) -> dict[str, Any]:
    domains = [driver.get_info(u) for u in driver.list_instance_uuids()]
    return {
        "domains": [{"uuid": d.uuid, "vcpus": d.vcpus, "memory_mb": d.memory_mb} for d in domains]
    }


def _audit(db_url: str, driver: FakeDriver | None) -> dict[str, Any]:
    with session_scope(db_url) as session:
        return audit_nodes(session, {"host1": _view(driver) if driver else None})


def _live(
    db_url: str, driver: FakeDriver, node_id: int, vcpus: int = 1, memory_mb: int = 512
) -> str:
    from tests.factories import flavor_dict

    uuid = make_instance(
        db_url,
        flavor=flavor_dict(vcpus, memory_mb, 1),
        host="host1",
        node="host1",
        vm_state="active",
        task_state=None,
    )
    claim(db_url, node_id, uuid, ResourceRequest(vcpus, memory_mb, 1))
    driver.spawn(GuestSpec(uuid=uuid, name="i", vcpus=vcpus, memory_mb=memory_mb, root_gb=1))
    return uuid


def test_a_consistent_node_audits_clean_with_three_equal_views(db_url: str) -> None:
    driver, node_id = _setup(db_url)
    _live(db_url, driver, node_id)
    _live(db_url, driver, node_id, vcpus=2, memory_mb=1024)
    report = _audit(db_url, driver)
    [node] = report["nodes"]
    assert report["leaks"] == 0 and node["discrepancies"] == []
    usage = node["usage"]
    assert (
        usage["allocations"]
        == usage["instances_and_migrations"]
        == {
            "VCPU": 3,
            "MEMORY_MB": 1536,
            "DISK_GB": 2,
        }
    )
    assert usage["hypervisor"] == {"VCPU": 3, "MEMORY_MB": 1536, "guests": 2}


def test_an_allocation_without_a_live_consumer_is_a_leak(db_url: str) -> None:
    driver, node_id = _setup(db_url)
    claim(db_url, node_id, str(uuid_module.uuid4()), ResourceRequest(1, 512, 1))
    report = _audit(db_url, driver)
    assert report["leaks"] == 1
    assert report["nodes"][0]["discrepancies"][0]["kind"] == "leaked_allocation"


def test_a_live_instance_without_allocation_is_a_leak(db_url: str) -> None:
    driver, node_id = _setup(db_url)
    uuid = _live(db_url, driver, node_id)
    with session_scope(db_url) as session:
        session.execute(Allocation.__table__.delete().where(Allocation.consumer_uuid == uuid))
    kinds = {f["kind"] for f in _audit(db_url, driver)["nodes"][0]["discrepancies"]}
    assert {"missing_allocation", "stale_usage"} <= kinds


def test_usage_columns_out_of_step_with_allocations_are_a_leak(db_url: str) -> None:
    driver, _ = _setup(db_url)
    with session_scope(db_url) as session:
        session.execute(update(ComputeNode).values(memory_mb_used=9999))
    [finding] = _audit(db_url, driver)["nodes"][0]["discrepancies"]
    assert finding["kind"] == "stale_usage" and "MEMORY_MB" in finding["detail"]


def test_an_orphan_guest_is_a_warning_not_a_leak_once_counted(db_url: str) -> None:
    driver, _ = _setup(db_url)
    orphan = str(uuid_module.uuid4())
    driver.spawn(GuestSpec(uuid=orphan, name="x", vcpus=1, memory_mb=256, root_gb=0))
    update_available_resource(sessions_for(db_url), driver, "host1", make_settings())
    report = _audit(db_url, driver)
    assert report["leaks"] == 0
    assert {f["kind"] for f in report["nodes"][0]["discrepancies"]} == {"orphan_domain"}


def test_negative_free_ram_under_a_ratio_above_one_is_overcommit_not_a_leak(db_url: str) -> None:
    driver, node_id = _setup(db_url, ram_allocation_ratio=1.5)
    for _ in range(3):
        _live(db_url, driver, node_id, memory_mb=15000)
    report = _audit(db_url, driver)
    node = report["nodes"][0]
    assert report["leaks"] == 0
    assert node["free"]["MEMORY_MB"] < 0
    assert node["overcommit"] and node["overcommit"][0].startswith("MEMORY_MB")


def test_a_host_that_does_not_answer_is_a_warning(db_url: str) -> None:
    _setup(db_url)
    report = _audit(db_url, None)
    assert report["leaks"] == 0
    assert report["nodes"][0]["discrepancies"][0]["kind"] == "hypervisor_unavailable"
