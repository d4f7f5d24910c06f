"""Evacuation and rebuild on two simulated hosts (``src`` and ``dst``, libvirt test:///
with real instance directories): the scheduler's claim, the host step's states, the undo
of a failure, and the source's clean-up at its next start (Nova's
``_destroy_evacuated_instances``), each checked against the accounting audit."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from compute import rebuild
from compute.audit import audit_node
from compute.claims import ResourceRequest, consumer_allocations
from compute.delete import local_delete
from compute.guest import guest_spec
from compute.instance_state import get_instance
from compute.recovery import recover_host
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import ComputeNode, Instance, Migration, Service, utcnow
from models.db import session_scope
from models.flavor import FlavorSnapshot
from novaq.exceptions import NoValidHost
from novaq.settings import get_settings
from scheduler.evacuate import EvacuationScheduler
from scheduler.manager import Scheduler
from tests.factories import claim, flavor_dict, make_compute_node, make_image_ref, make_instance
from tests.unit.compute.conftest import Hosts
from tests.unit.workflows.servers import clear_queues
from virt import power_state
from virt.driver import GuestInfo, GuestSpec
from virt.host_profile import HostProfile
from virt.libvirt.imagecache import cache_file_name
from virt.simulated import SimulatedHostDriver
from workflows import api

FLAVOR = flavor_dict(2, 2048, 1)
QUEUES = ("scheduler", "compute.src", "compute.dst")


@pytest.fixture(autouse=True)
def _no_messages_left() -> Iterator[None]:
    """The API sends the evacuation's scheduler step; here the steps are called directly,
    so the message is dropped rather than left for a later test's worker."""
    yield
    clear_queues(*QUEUES)


def _server(db_url: str, hosts: Hosts, vm_state: str = "active") -> tuple[str, dict[str, int]]:
    """A server launched on ``src`` (its claim and its guest), both hosts' compute services
    up, then ``src`` forced down."""
    nodes = {h: make_compute_node(db_url, h) for h in ("src", "dst")}
    uuid = make_instance(
        db_url,
        flavor=FLAVOR,
        host="src",
        node="src",
        vm_state=vm_state,
        task_state=None,
        launched_at=utcnow(),
        request_spec={"flavor": FLAVOR},
    )
    claim(db_url, nodes["src"], uuid, ResourceRequest.from_flavor(FlavorSnapshot.load(FLAVOR)))
    with session_scope(db_url) as session:
        hosts["src"].spawn(guest_spec(session, get_instance(session, uuid)))
    if vm_state == "stopped":
        hosts["src"].power_off(uuid)
    with session_scope(db_url) as session:
        session.execute(update(Service).where(Service.host == "src").values(forced_down=True))
    return uuid, nodes


def _migration(db_url: str, uuid: str) -> Migration:
    with session_scope(db_url) as session:
        row = session.scalars(select(Migration).where(Migration.instance_uuid == uuid)).one()
        session.expunge(row)
        return row


def _held(db_url: str, consumer: str) -> dict[str, int]:
    with session_scope(db_url) as session:
        return consumer_allocations(session, consumer)


def _state(db_url: str, uuid: str) -> tuple[Any, ...]:
    with session_scope(db_url) as session:
        i = get_instance(session, uuid)
        return i.vm_state, i.task_state, i.host, i.node


def _leaks(db_url: str) -> list[dict[str, Any]]:
    with session_scope(db_url) as session:
        nodes = session.scalars(select(ComputeNode)).all()
        return [
            f
            for node in nodes
            for f in audit_node(session, node, None)["discrepancies"]
            if f["severity"] == "leak"
        ]


def _select(db_url: str, migration_uuid: str) -> str:
    selection = EvacuationScheduler(Scheduler(get_settings())).select(
        sessions_for(db_url), migration_uuid
    )
    return selection.host


def _ctx(db_url: str, hosts: Hosts, host: str) -> StepContext:
    with session_scope(db_url) as session:
        request_id = session.scalars(
            select(Migration.request_id).order_by(Migration.id.desc())
        ).first()
    return StepContext(sessions_for(db_url), hosts[host], host, request_id or "")


@pytest.mark.parametrize("vm_state", ["active", "stopped"])
def test_an_evacuated_server_runs_on_the_destination_and_the_source_cleans_up_at_start(
    db_url: str, hosts: Hosts, vm_state: str
) -> None:
    uuid, nodes = _server(db_url, hosts, vm_state)
    api.evacuate(uuid)
    migration = _migration(db_url, uuid).uuid

    assert _select(db_url, migration) == "dst"
    # The scheduler's claim: the migration holds the source, the instance the destination.
    assert _migration(db_url, uuid).status == "pre-migrating"
    assert (
        _held(db_url, migration)
        == _held(db_url, uuid)
        == {
            "VCPU": 2,
            "MEMORY_MB": 2048,
            "DISK_GB": 1,
        }
    )
    assert _leaks(db_url) == []

    assert rebuild.evacuate_instance(_ctx(db_url, hosts, "dst"), migration) == "done"

    wanted = "stopped" if vm_state == "stopped" else "active"
    assert _state(db_url, uuid) == (wanted, None, "dst", "dst")
    running = power_state.SHUTDOWN if vm_state == "stopped" else power_state.RUNNING
    assert hosts["dst"].get_info(uuid).power_state == running
    assert _migration(db_url, uuid).status == "done"
    # Until the source comes back, the evacuation keeps its allocation there.
    assert _held(db_url, migration) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 1}
    assert _leaks(db_url) == []
    assert hosts["src"].instance_exists(uuid)

    done = recover_host(sessions_for(db_url), hosts["src"], "src")

    assert any("guest destroyed" in line for line in done)
    assert not hosts["src"].instance_exists(uuid)
    assert not hosts["src"].instance_files_exist(uuid)
    assert _migration(db_url, uuid).status == "completed"
    assert _held(db_url, migration) == {}
    assert _leaks(db_url) == []
    # A second start finds nothing left to do.
    assert not any(
        "evacuat" in line for line in recover_host(sessions_for(db_url), hosts["src"], "src")
    )
    actions = api.list_actions(uuid)
    assert actions[-1]["action"] == "evacuate"
    assert [e["event"] for e in actions[-1]["events"]] == ["compute_rebuild_instance"]


def test_no_valid_host_errors_the_server_where_it_was_and_keeps_its_claim(
    db_url: str, hosts: Hosts
) -> None:
    uuid, nodes = _server(db_url, hosts)
    with session_scope(db_url) as session:
        session.execute(update(Service).where(Service.host == "dst").values(disabled=True))
    api.evacuate(uuid, host="dst")
    migration = _migration(db_url, uuid).uuid

    with pytest.raises(NoValidHost):
        _select(db_url, migration)
    # The task's handler (tasks/rebuild.py) records the end as Nova's conductor does.
    assert rebuild.abort_evacuation(
        sessions_for(db_url), migration, NoValidHost(reason="x"), None, rebuild.SCHEDULE_EVENT
    )

    assert _state(db_url, uuid) == ("error", None, "src", "src")
    assert _migration(db_url, uuid).status == "error"
    assert _held(db_url, uuid) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 1}
    assert _held(db_url, migration) == {}
    assert _leaks(db_url) == []
    events = api.list_actions(uuid)[-1]["events"]
    assert [(e["event"], e["result"]) for e in events] == [("conductor_rebuild_server", "Error")]
    # Undone once: the errback that follows finds nothing left.
    assert not rebuild.abort_evacuation(sessions_for(db_url), migration, ValueError(), None)


def test_a_spawn_failure_on_the_destination_is_undone_without_leaks(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid, nodes = _server(db_url, hosts)
    broken = SimulatedHostDriver(
        HostProfile("dst", fail_spawn=True),
        tmp_path / "state" / "dst-broken",
        instances_path=tmp_path / "dst-broken",
    )
    broken.init_host("dst")
    api.evacuate(uuid)
    migration = _migration(db_url, uuid).uuid
    assert _select(db_url, migration) == "dst"

    ctx = StepContext(sessions_for(db_url), broken, "dst", _ctx(db_url, hosts, "dst").request_id)
    with pytest.raises(Exception, match="refuses to start guests"):
        rebuild.evacuate_instance(ctx, migration)
    broken.close()

    assert _state(db_url, uuid) == ("error", None, "src", "src")
    assert _migration(db_url, uuid).status == "failed"
    assert _held(db_url, uuid) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 1}
    assert _held(db_url, migration) == {}
    with session_scope(db_url) as session:
        held = consumer_allocations(session, uuid, nodes["dst"])
    assert held == {}
    assert not broken.instance_files_exist(uuid)
    assert _leaks(db_url) == []
    api_view = api.show(uuid)
    assert "refuses to start guests" in api_view["fault"]["message"]
    # A failed evacuation is not cleaned up by the source (its server is back there).
    recover_host(sessions_for(db_url), hosts["src"], "src")
    assert hosts["src"].instance_exists(uuid)


def test_a_redelivered_evacuation_step_resumes_and_one_that_ended_is_skipped(
    db_url: str, hosts: Hosts
) -> None:
    uuid, nodes = _server(db_url, hosts)
    api.evacuate(uuid)
    migration = _migration(db_url, uuid).uuid
    _select(db_url, migration)
    assert _select(db_url, migration) == "dst"  # a redelivered scheduler step: same claim
    with session_scope(db_url) as session:  # the worker died mid-spawn
        session.execute(
            update(Instance)
            .where(Instance.uuid == uuid)
            .values(task_state="rebuild_spawning", host="dst", node="dst")
        )
    ctx = _ctx(db_url, hosts, "dst")
    assert rebuild.evacuate_instance(ctx, migration) == "done"
    assert rebuild.evacuate_instance(ctx, migration) == "skipped"
    assert _state(db_url, uuid) == ("active", None, "dst", "dst")
    assert _leaks(db_url) == []


@pytest.mark.parametrize(
    ("vm_state", "final", "power"),
    [
        ("active", "active", power_state.RUNNING),
        ("error", "active", power_state.RUNNING),  # Nova: a rebuild repairs an ERROR server
        ("stopped", "stopped", power_state.SHUTDOWN),
    ],
)
def test_rebuild_keeps_the_host_and_claim_and_recreates_the_disk_from_the_new_image(
    db_url: str, hosts: Hosts, vm_state: str, final: str, power: int
) -> None:
    uuid, nodes = _server(db_url, hosts, vm_state)
    fedora = make_image_ref(db_url, "fedora")
    with session_scope(db_url) as session:
        session.execute(update(Service).where(Service.host == "src").values(forced_down=False))
        instance = get_instance(session, uuid)
        instance.task_state, instance.image_ref = "rebuilding", fedora
    directory = hosts["src"].instances_path / uuid
    (directory / "old-data").write_text("the guest's data before the rebuild")
    ctx = StepContext(sessions_for(db_url), hosts["src"], "src", "req-test")

    assert rebuild.rebuild_instance(ctx, uuid) == "done"

    assert _state(db_url, uuid) == (final, None, "src", "src")
    assert not (directory / "old-data").exists()  # the old disks went with their directory
    assert _backing(directory / "disk") == cache_file_name(fedora)
    assert hosts["src"].get_info(uuid).power_state == power
    assert _held(db_url, uuid) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 1}
    assert _leaks(db_url) == []


def _backing(disk: Path) -> str:
    info = subprocess.run(
        ["qemu-img", "info", "--output=json", "-U", str(disk)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return Path(json.loads(info.stdout)["backing-filename"]).name


def test_a_failed_rebuild_leaves_the_server_in_error_with_a_fault(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid, nodes = _server(db_url, hosts)
    with session_scope(db_url) as session:
        get_instance(session, uuid).task_state = "rebuilding"
    broken = SimulatedHostDriver(
        HostProfile("src", fail_spawn=True),
        tmp_path / "state" / "src-broken",
        instances_path=tmp_path / "src-broken",
    )
    broken.init_host("src")
    ctx = StepContext(sessions_for(db_url), broken, "src", "req-test")
    with pytest.raises(Exception, match="refuses to start guests"):
        rebuild.rebuild_instance(ctx, uuid)
    broken.close()
    assert _state(db_url, uuid) == ("error", None, "src", "src")
    assert "refuses to start guests" in api.show(uuid)["fault"]["message"]
    assert _held(db_url, uuid) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 1}
    assert _leaks(db_url) == []


def test_a_guest_left_by_an_evacuation_undone_while_its_destination_was_down_goes_at_its_start(
    db_url: str, hosts: Hosts
) -> None:
    """The destination spawned, then died before recording it; the reaper's undo (the
    errback's) sent the server back to its source. The destination's restart removes the
    guest it still has."""
    uuid, nodes = _server(db_url, hosts)
    api.evacuate(uuid)
    migration = _migration(db_url, uuid).uuid
    _select(db_url, migration)
    with session_scope(db_url) as session:
        hosts["dst"].spawn(guest_spec(session, get_instance(session, uuid)))
    assert rebuild.abort_evacuation(sessions_for(db_url), migration, RuntimeError("lost"), "dst")
    assert _state(db_url, uuid) == ("error", None, "src", "src")

    done = recover_host(sessions_for(db_url), hosts["dst"], "dst")

    assert f"{uuid}: failed evacuation to dst -> guest destroyed" in done
    assert not hosts["dst"].instance_exists(uuid)
    assert not hosts["dst"].instance_files_exist(uuid)
    assert hosts["src"].instance_exists(uuid)  # the source's guest is the server's
    assert _leaks(db_url) == []


class _DeletedWhileSpawning(SimulatedHostDriver):
    """A host on which the server is deleted (by the API's local delete) just as its new
    guest starts: the race a delete wins over a rebuild in flight."""

    def __init__(self, *args: Any, db_url: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.db_url = db_url

    def spawn(self, spec: GuestSpec) -> GuestInfo:
        local_delete(sessions_for(self.db_url), spec.uuid, "req-delete")
        return super().spawn(spec)


def test_a_server_deleted_mid_rebuild_leaves_no_guest_no_files_no_allocation(
    db_url: str, hosts: Hosts, tmp_path: Path
) -> None:
    uuid, nodes = _server(db_url, hosts)
    with session_scope(db_url) as session:
        session.execute(update(Service).where(Service.host == "src").values(forced_down=False))
        get_instance(session, uuid).task_state = "rebuilding"
    racing = _DeletedWhileSpawning(
        HostProfile("src"),
        tmp_path / "state" / "racing",
        instances_path=tmp_path / "racing",
        db_url=db_url,
    )
    racing.init_host("src")
    try:
        ctx = StepContext(sessions_for(db_url), racing, "src", "req-test")
        assert rebuild.rebuild_instance(ctx, uuid) == "superseded"
        assert not racing.instance_exists(uuid)
        assert not racing.instance_files_exist(uuid)
    finally:
        racing.close()
    assert _held(db_url, uuid) == {}
    assert _leaks(db_url) == []


def test_a_server_deleted_after_its_evacuation_still_frees_its_source_at_the_sources_start(
    db_url: str, hosts: Hosts
) -> None:
    uuid, nodes = _server(db_url, hosts)
    api.evacuate(uuid)
    migration = _migration(db_url, uuid).uuid
    _select(db_url, migration)
    rebuild.evacuate_instance(_ctx(db_url, hosts, "dst"), migration)
    hosts["dst"].destroy(uuid)
    local_delete(sessions_for(db_url), uuid, "req-delete")  # the delete's accounting
    # The source is still down: the evacuation keeps its allocation there, as expected.
    assert _held(db_url, migration) == {"VCPU": 2, "MEMORY_MB": 2048, "DISK_GB": 1}
    assert _leaks(db_url) == []

    recover_host(sessions_for(db_url), hosts["src"], "src")

    assert not hosts["src"].instance_exists(uuid)
    assert _held(db_url, migration) == {}
    assert _migration(db_url, uuid).status == "completed"
    assert _leaks(db_url) == []
