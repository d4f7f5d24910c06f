"""update_available_resource on a fake hypervisor: node record, PCI sync, heals."""

from __future__ import annotations

import json
import uuid as uuid_module

from sqlalchemy import select

from compute.build import build_and_run_instance
from compute.claims import ResourceRequest, consumer_allocations
from compute.delete import local_delete
from compute.resource_tracker import update_available_resource
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import ComputeNode, ResourceHeal
from models.db import session_scope
from tests.factories import claim, gpu_settings, gpus, host_resources, make_instance, make_settings
from virt.driver import GuestInfo, GuestSpec
from virt.fake import FakeDriver


def _driver(name: str = "host1", **kw: object) -> FakeDriver:
    return FakeDriver(host_resources(name, **kw))  # type: ignore[arg-type]


def _node(db_url: str, host: str = "host1") -> ComputeNode:
    with session_scope(db_url) as session:
        node = session.scalars(
            select(ComputeNode).where(ComputeNode.host == host, ComputeNode.deleted == 0)
        ).one()
        session.expunge(node)
        return node


def _heals(db_url: str) -> list[tuple[str, str | None]]:
    with session_scope(db_url) as session:
        return [(h.action, h.consumer_uuid) for h in session.scalars(select(ResourceHeal))]


def test_first_run_records_the_node_from_the_hypervisor(db_url: str) -> None:
    settings = gpu_settings(reserved_host_memory_mb=1024)
    driver = _driver(
        vcpus=8, memory_mb=16384, local_gb=200, pci_devices=gpus("0000:08:00.0", "0000:88:00.0")
    )
    assert update_available_resource(sessions_for(db_url), driver, "host1", settings) == []
    node = _node(db_url)
    assert (node.vcpus, node.memory_mb, node.local_gb) == (8, 16384, 200)
    assert (node.memory_mb_used, node.free_ram_mb) == (1024, 15360)
    assert node.cpu_allocation_ratio == 4.0


def test_orphan_domain_is_counted_as_used_then_forgotten_when_it_goes(db_url: str) -> None:
    driver = _driver()
    settings = make_settings()
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    orphan = str(uuid_module.uuid4())
    driver.spawn(GuestSpec(uuid=orphan, name="behind-the-back", vcpus=2, memory_mb=4096, root_gb=0))
    heals = update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert [(h["action"], h["consumer_uuid"]) for h in heals] == [("orphan_counted", orphan)]
    assert json.loads(heals[0]["resources"]) == {"MEMORY_MB": 4096, "VCPU": 2}
    node = _node(db_url)
    assert (node.vcpus_used, node.memory_mb_used) == (2, 512 + 4096)
    driver.destroy(orphan)
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert _node(db_url).memory_mb_used == 512
    assert _heals(db_url)[-1] == ("removed", orphan)


def test_a_guest_deleted_after_the_hypervisor_read_is_not_counted_as_an_orphan(
    db_url: str,
) -> None:
    """The hypervisor is read before the heal's transaction. A delete that destroys the
    guest and commits in between must not leave the guest counted as an orphan."""
    settings = make_settings()
    update_available_resource(sessions_for(db_url), _driver(), "host1", settings)
    uuid = make_instance(db_url, host="host1", node="host1", vm_state="active", task_state=None)
    claim(db_url, _node(db_url).id, uuid, ResourceRequest(1, 512, 1))

    class DeletedMeanwhile(FakeDriver):
        def get_info(self, instance_uuid: str) -> GuestInfo:
            info = super().get_info(instance_uuid)
            self.destroy(instance_uuid)  # the delete: guest first, then the database
            local_delete(sessions_for(db_url), instance_uuid, "req-delete")
            return info

    driver = DeletedMeanwhile(host_resources("host1"))
    driver.spawn(GuestSpec(uuid=uuid, name="i", vcpus=1, memory_mb=512, root_gb=1))
    assert update_available_resource(sessions_for(db_url), driver, "host1", settings) == []
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid) == {}
    assert _node(db_url).memory_mb_used == 512


def test_allocation_of_a_deleted_instance_is_removed_and_recorded(db_url: str) -> None:
    settings = make_settings()
    driver = _driver()
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    gone = make_instance(db_url, vm_state="deleted", deleted=1)
    claim(db_url, _node(db_url).id, gone, ResourceRequest(1, 1024, 1))
    heals = update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert [(h["action"], h["consumer_uuid"], h["reason"]) for h in heals] == [
        ("removed", gone, "instance is deleted")
    ]
    assert _node(db_url).memory_mb_used == 512


def test_missing_allocation_of_a_live_instance_is_recreated(db_url: str) -> None:
    settings = make_settings()
    driver = _driver()
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    live = make_instance(db_url, vm_state="active", task_state=None, host="host1", node="host1")
    heals = update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert [(h["action"], h["consumer_uuid"]) for h in heals] == [("recreated", live)]
    with session_scope(db_url) as session:
        assert consumer_allocations(session, live) == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


def test_a_clean_node_needs_no_heal(db_url: str) -> None:
    settings = make_settings()
    driver = _driver()
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    node_id = _node(db_url).id
    uuid = make_instance(db_url, host="host1", node="host1")
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    build_and_run_instance(StepContext(sessions_for(db_url), driver, "host1", "req-test"), uuid)
    assert update_available_resource(sessions_for(db_url), driver, "host1", settings) == []


def test_a_node_the_driver_no_longer_reports_is_deleted(db_url: str) -> None:
    settings = make_settings()
    update_available_resource(sessions_for(db_url), _driver("old-node"), "host1", settings)
    heals = update_available_resource(sessions_for(db_url), _driver("new-node"), "host1", settings)
    assert [(h["action"], h["node"]) for h in heals] == [("node_deleted", "old-node")]
    assert _node(db_url).hypervisor_hostname == "new-node"


def test_devices_held_by_a_consumer_that_is_gone_are_freed(db_url: str) -> None:
    from compute.claims import ResourceRequest as Request
    from compute.pci import PciRequest
    from tests.factories import GPU_ALIAS

    settings = gpu_settings()
    driver = _driver(pci_devices=gpus("0000:08:00.0"))
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    ghost = make_instance(db_url, vm_state="deleted", deleted=1)
    claim(
        db_url,
        _node(db_url).id,
        ghost,
        Request(1, 512, 1, pci=(PciRequest(GPU_ALIAS, 1, "10de", "13f1"),)),
    )
    heals = update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert {h["action"] for h in heals} == {"removed"}
    from compute.pci import held_devices

    with session_scope(db_url) as session:
        assert held_devices(session, ghost) == []
