from __future__ import annotations

from compute.claims import ResourceRequest, claim, consumer_allocations
from compute.instance_state import get_instance
from compute.recovery import recover_host
from models.db import session_scope
from tests.factories import host_resources, make_compute_node, make_instance
from virt.driver import GuestSpec
from virt.fake import FakeDriver


def _placed(db_url: str, node_id: int, **state: object) -> str:
    uuid = make_instance(db_url, host="host1", node="host1", **state)
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid


def test_an_interrupted_build_is_errored_out_and_its_guest_destroyed(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1")
    driver = FakeDriver(host_resources("host1"))
    uuid = _placed(db_url, node_id, task_state="spawning")
    driver.spawn(GuestSpec(uuid=uuid, name="half-built", vcpus=1, memory_mb=512, root_gb=1))
    assert recover_host(db_url, driver, "host1") == [f"{uuid}: interrupted build -> ERROR"]
    assert driver.list_instance_uuids() == []
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.host) == ("error", None, None)
        assert consumer_allocations(session, uuid) == {}


def test_a_build_still_queued_for_this_host_is_left_to_its_message(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1")
    uuid = _placed(db_url, node_id, task_state="scheduling")
    assert recover_host(db_url, FakeDriver(host_resources("host1")), "host1") == []
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).task_state == "scheduling"


def test_an_interrupted_delete_is_completed(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1")
    driver = FakeDriver(host_resources("host1"))
    uuid = _placed(db_url, node_id, vm_state="active", task_state="deleting")
    driver.spawn(GuestSpec(uuid=uuid, name="dying", vcpus=1, memory_mb=512, root_gb=1))
    recover_host(db_url, driver, "host1")
    assert driver.list_instance_uuids() == []
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).vm_state == "deleted"
        assert consumer_allocations(session, uuid) == {}
