"""update_available_resource costs a number of SQL statements that does not depend on how
many guests the host runs (issue 16): no per-instance query, on libvirt's test driver."""

from __future__ import annotations

import uuid as uuid_module
from pathlib import Path

from compute.resource_tracker import update_available_resource
from compute.sessions import sessions_for
from compute.states import TaskState, VmState
from tests.factories import make_instance, make_settings, statements_run
from virt.driver import GuestSpec
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.simulated import SimulatedHostDriver


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
