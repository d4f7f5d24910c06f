"""update_available_resource costs a number of SQL statements that does not depend on how
many guests the host runs (issue 16): no per-instance query, on libvirt's test driver."""

from __future__ import annotations

import dataclasses
import uuid as uuid_module
from pathlib import Path

from sqlalchemy import select, update

from compute.resource_tracker import update_available_resource
from compute.sessions import sessions_for
from compute.states import TaskState, VmState
from models import ComputeNode, PciDevice
from models.db import session_scope
from novaq.settings import Settings
from tests.factories import (
    gpu_settings,
    gpus,
    host_resources,
    make_instance,
    make_settings,
    statements_run,
)
from virt.driver import GuestSpec
from virt.fake import FakeDriver
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.simulated import SimulatedHostDriver


def node_of(db_url: str, host: str) -> ComputeNode:
    with session_scope(db_url) as session:
        node = session.scalars(select(ComputeNode).where(ComputeNode.host == host)).one()
        session.expunge(node)
        return node


def _steady_audit_statements(db_url: str, tmp_path: Path, guests: int) -> int:
    """Statements of a pass over a host whose ``guests`` live instances each run their
    guest and hold their allocations (the pass before records them: the steady state)."""
    host = f"h{guests}"
    driver = SimulatedHostDriver(HostProfile(host, vcpus=512, memory_mb=262144), tmp_path / host)
    driver.init_host(host)
    settings = make_settings()
    try:
        for index in range(guests):
            uuid = make_instance(
                db_url, vm_state=VmState.ACTIVE, task_state=None, host=host, node=host
            )
            spec = GuestSpec(uuid=uuid, name=f"{host}-{index}", vcpus=1, memory_mb=512, root_gb=1)
            libvirt = driver.libvirt_driver
            libvirt.host.define_domain(libvirt.guest_xml(spec)).create()
        first = update_available_resource(sessions_for(db_url), driver, host, settings)
        assert [h["action"] for h in first] == ["recreated"] * guests
        with statements_run(db_url) as seen:
            assert update_available_resource(sessions_for(db_url), driver, host, settings) == []
        return len(seen)
    finally:
        driver.close()


def test_a_steady_pass_costs_as_many_statements_for_100_guests_as_for_10(
    db_url: str, tmp_path: Path
) -> None:
    assert _steady_audit_statements(db_url, tmp_path, 10) == _steady_audit_statements(
        db_url, tmp_path, 100
    )


def test_an_orphan_guest_is_still_found_among_many_listed_without_their_xml(
    db_url: str, tmp_path: Path
) -> None:
    """The listing reads no ownership; the heal asks about the one guest it would count."""
    host = "h-orphan"
    driver = SimulatedHostDriver(HostProfile(host), tmp_path / host)
    driver.init_host(host)
    settings = make_settings()
    try:
        live = make_instance(db_url, vm_state=VmState.ACTIVE, task_state=None, host=host, node=host)
        building = make_instance(db_url, task_state=TaskState.SPAWNING, host=host, node=host)
        orphan = str(uuid_module.uuid4())
        for uuid in (live, building, orphan):
            spec = GuestSpec(uuid=uuid, name=f"g-{uuid[:8]}", vcpus=2, memory_mb=1024, root_gb=1)
            driver.spawn(spec)
        # Another novaq host's guest on the same hypervisor is not this host's orphan.
        other = LibvirtDriver("test:///default", instances_path=tmp_path / "other")
        other.init_host("other-host")
        foreign = GuestSpec(
            uuid=str(uuid_module.uuid4()), name="foreign", vcpus=1, memory_mb=64, root_gb=0
        )
        driver.libvirt_driver.host.define_domain(other.guest_xml(foreign)).create()
        heals = update_available_resource(sessions_for(db_url), driver, host, settings)
        assert sorted((h["action"], h["consumer_uuid"]) for h in heals) == sorted(
            [("recreated", live), ("recreated", building), ("orphan_counted", orphan)]
        )
    finally:
        driver.close()


def _steady_fake_host(db_url: str) -> tuple[FakeDriver, Settings]:
    """host1 with two live instances running their guests and holding their claims."""
    driver, settings = FakeDriver(host_resources("host1")), make_settings()
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    for index in range(2):
        uuid = make_instance(
            db_url, vm_state=VmState.ACTIVE, task_state=None, host="host1", node="host1"
        )
        driver.spawn(GuestSpec(uuid=uuid, name=f"g{index}", vcpus=1, memory_mb=512, root_gb=1))
    assert len(update_available_resource(sessions_for(db_url), driver, "host1", settings)) == 2
    return driver, settings


def test_a_steady_pass_is_two_reads_and_writes_nothing(db_url: str) -> None:
    """The host's nodes (with whether each has device rows: this one has none, and its
    hypervisor reports none, so the PCI sync reads nothing), and the one grouped read of
    the steady state (compute.steady_usage.steady_usage). As Nova's ``_update`` saves
    the compute node only when a field changed, nothing is written: not the update time,
    not the derived usage (current), no generation bump."""
    driver, settings = _steady_fake_host(db_url)
    before = node_of(db_url, "host1")
    with statements_run(db_url) as seen:
        assert update_available_resource(sessions_for(db_url), driver, "host1", settings) == []
    assert [" ".join(s.split()[:3]) for s in seen] == [
        "SELECT compute_nodes.id, compute_nodes.uuid,",
        "SELECT 'n', CAST(NULL",
    ]
    after = node_of(db_url, "host1")
    assert (after.generation, after.updated_at) == (before.generation, before.updated_at)
    assert (after.vcpus_used, after.memory_mb_used, after.running_vms) == (2, 512 + 1024, 2)


def test_a_changed_hypervisor_view_is_written_with_its_time(db_url: str) -> None:
    """What the hypervisor reports changed (more memory): the node's row is written, and
    its update time with it."""
    driver, settings = _steady_fake_host(db_url)
    before = node_of(db_url, "host1")
    driver.resources = dataclasses.replace(
        driver.resources, memory_mb=driver.resources.memory_mb + 1024
    )
    with statements_run(db_url) as seen:
        assert update_available_resource(sessions_for(db_url), driver, "host1", settings) == []
    # (the hypervisor's view with its time; then the derived usage, free memory changed)
    recorded, usage = [s for s in seen if s.startswith("UPDATE compute_nodes SET")]
    assert "memory_mb=" in recorded and "updated_at" in recorded
    assert "free_ram_mb" in usage
    after = node_of(db_url, "host1")
    assert after.memory_mb == before.memory_mb + 1024
    assert before.updated_at is not None and after.updated_at is not None
    assert after.updated_at > before.updated_at


def test_a_guest_the_database_does_not_account_costs_one_statement_more(db_url: str) -> None:
    """Asked as the heal asks it (is it a live instance elsewhere?), whatever the number
    of such guests; another host's guest is not this host's orphan."""
    driver, settings = _steady_fake_host(db_url)
    elsewhere = [
        make_instance(db_url, vm_state=VmState.ACTIVE, task_state=None, host="host2")
        for _ in range(3)
    ]
    for uuid in elsewhere:
        driver.spawn(GuestSpec(uuid=uuid, name=uuid[:8], vcpus=1, memory_mb=64, root_gb=0))
    with statements_run(db_url) as seen:
        assert update_available_resource(sessions_for(db_url), driver, "host1", settings) == []
    assert len(seen) == 3 and seen[-1].startswith("SELECT instances.uuid")


def test_stale_usage_columns_are_rewritten_by_a_steady_pass(db_url: str) -> None:
    driver, settings = _steady_fake_host(db_url)
    with session_scope(db_url) as session:
        session.execute(
            update(ComputeNode).where(ComputeNode.host == "host1").values(vcpus_used=40)
        )
    before = node_of(db_url, "host1")
    with statements_run(db_url) as seen:
        assert update_available_resource(sessions_for(db_url), driver, "host1", settings) == []
    assert len(seen) == 3 and seen[-1].startswith("UPDATE compute_nodes SET vcpus_used")
    after = node_of(db_url, "host1")
    assert (after.vcpus_used, after.generation) == (2, before.generation + 1)


def test_a_reserved_amount_changed_in_the_settings_is_applied_by_a_steady_pass(
    db_url: str,
) -> None:
    driver, settings = _steady_fake_host(db_url)
    more = make_settings(reserved_host_memory_mb=2048)
    assert update_available_resource(sessions_for(db_url), driver, "host1", more) == []
    node = node_of(db_url, "host1")
    assert (node.memory_mb_used, node.free_ram_mb) == (2048 + 1024, 32768 - 2048 - 1024)


def test_a_node_with_devices_is_synced_and_one_with_none_reads_none(db_url: str) -> None:
    """The PCI sync runs while the hypervisor reports devices or the node has device rows:
    a device that vanished from the report is still removed; once none is left on either
    side, a pass reads no device."""
    settings = gpu_settings()
    driver = FakeDriver(host_resources("host1", pci_devices=gpus("0000:08:00.0")))
    update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert _live_devices(db_url) == ["0000:08:00.0"]

    driver.resources = dataclasses.replace(driver.resources, pci_devices=())
    with statements_run(db_url) as seen:
        update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert any(s.startswith("SELECT pci_devices.id") for s in seen)
    assert _live_devices(db_url) == []  # the free device vanished: removed

    with statements_run(db_url) as seen:
        update_available_resource(sessions_for(db_url), driver, "host1", settings)
    assert not any(s.startswith("SELECT pci_devices.id") for s in seen), seen


def _live_devices(db_url: str) -> list[str]:
    with session_scope(db_url) as session:
        return list(session.scalars(select(PciDevice.address).where(PciDevice.deleted == 0)))
