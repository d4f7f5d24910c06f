"""``compute.periodic.running_deleted`` on real state: SQLite rows and host1 as a
simulated host (a real libvirt ``test:///`` node) per test."""

from __future__ import annotations

import logging
import uuid as uuid_module

import pytest
from sqlalchemy import select

from compute.audit import audit_nodes
from compute.heal import release_destroyed_orphan
from compute.instance_state import get_instance
from compute.periodic import running_deleted
from compute.resource_tracker import update_available_resource
from compute.sessions import sessions_for
from models import Allocation, ComputeNode, Instance, ResourceHeal
from models.db import session_scope
from tests.factories import make_settings
from tests.unit.compute.periodic.servers import ago, host1_server, periodic_ctx, spawn_guest
from virt.power_state import NOSTATE, RUNNING, SHUTDOWN
from virt.simulated import SimulatedHostDriver


def _deleted(db_url: str, hypervisor: SimulatedHostDriver, deleted_s_ago: int = 600) -> str:
    uuid = host1_server(
        db_url, "deleted", NOSTATE, deleted=1, deleted_at=ago(deleted_s_ago), host="host1"
    )
    spawn_guest(hypervisor, uuid)  # the delete never reached the hypervisor
    return uuid


def test_reap_destroys_the_guest_of_a_deleted_server_and_its_files(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    uuid = _deleted(db_url, hypervisor)
    assert hypervisor.instance_files_exist(uuid)
    ctx = periodic_ctx(db_url, hypervisor, running_deleted_instance_action="reap")
    summary = running_deleted.cleanup_running_deleted_instances(ctx)
    assert summary == {"action": "reap", "instances": [uuid], "failed": []}
    assert not hypervisor.instance_exists(uuid)
    assert not hypervisor.instance_files_exist(uuid)
    with session_scope(db_url) as session:  # counted as Nova's cleanup: nothing pending
        instance = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        assert instance.cleaned == 1
        assert instance.system_metadata["clean_attempts"] == "1"
    assert running_deleted.cleanup_running_deleted_instances(ctx)["instances"] == []


def test_shutdown_powers_the_guest_off_and_keeps_it(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    uuid = _deleted(db_url, hypervisor)
    ctx = periodic_ctx(db_url, hypervisor, running_deleted_instance_action="shutdown")
    assert running_deleted.cleanup_running_deleted_instances(ctx)["instances"] == [uuid]
    assert hypervisor.get_info(uuid).power_state == SHUTDOWN


def test_log_only_warns_with_novas_message(
    db_url: str, hypervisor: SimulatedHostDriver, caplog: pytest.LogCaptureFixture
) -> None:
    uuid = _deleted(db_url, hypervisor)
    ctx = periodic_ctx(db_url, hypervisor, running_deleted_instance_action="log")
    with caplog.at_level(logging.WARNING, logger=running_deleted.__name__):
        assert running_deleted.cleanup_running_deleted_instances(ctx)["instances"] == [uuid]
    assert hypervisor.get_info(uuid).power_state == RUNNING
    with session_scope(db_url) as session:
        name = f"instance-{get_instance(session, uuid).id:08x}"
    assert (
        f"Detected instance with name label '{name}' which is marked as DELETED but still "
        "present on host." in caplog.text
    )


def test_noop_does_nothing(db_url: str, hypervisor: SimulatedHostDriver) -> None:
    uuid = _deleted(db_url, hypervisor)
    ctx = periodic_ctx(db_url, hypervisor, running_deleted_instance_action="noop")
    assert running_deleted.cleanup_running_deleted_instances(ctx)["instances"] == []
    assert hypervisor.get_info(uuid).power_state == RUNNING


def test_a_guest_deleted_more_recently_than_the_timeout_is_left_for_now(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    recent = _deleted(db_url, hypervisor, deleted_s_ago=5)
    old = _deleted(db_url, hypervisor, deleted_s_ago=600)
    ctx = periodic_ctx(
        db_url,
        hypervisor,
        running_deleted_instance_action="reap",
        running_deleted_instance_timeout=60,
    )
    assert running_deleted.cleanup_running_deleted_instances(ctx)["instances"] == [old]
    assert hypervisor.instance_exists(recent) and not hypervisor.instance_exists(old)


def test_live_soft_deleted_and_rowless_guests_are_never_reaped(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    live = host1_server(db_url, "active")
    soft_deleted = host1_server(db_url, "soft-delete", SHUTDOWN, deleted_at=ago(600))
    orphan = str(uuid_module.uuid4())  # a guest with no instance row: the audit's, not ours
    for uuid in (live, soft_deleted, orphan):
        spawn_guest(hypervisor, uuid)
    ctx = periodic_ctx(db_url, hypervisor, running_deleted_instance_action="reap")
    assert running_deleted.cleanup_running_deleted_instances(ctx)["instances"] == []
    assert all(hypervisor.instance_exists(u) for u in (live, soft_deleted, orphan))


def test_a_reaped_guest_that_a_heal_counted_as_an_orphan_gives_its_usage_back(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    uuid = _deleted(db_url, hypervisor)
    # The start-up update_available_resource counts the deleted server's running guest.
    heals = update_available_resource(sessions_for(db_url), hypervisor, "host1", make_settings())
    assert [h["action"] for h in heals] == ["orphan_counted"]
    assert _memory_used(db_url) == 512 + 64
    ctx = periodic_ctx(db_url, hypervisor, running_deleted_instance_action="reap")
    assert running_deleted.cleanup_running_deleted_instances(ctx)["instances"] == [uuid]
    assert _memory_used(db_url) == 512  # now, not at the next pass
    with session_scope(db_url) as session:
        assert (
            session.scalars(select(Allocation).where(Allocation.consumer_uuid == uuid)).all() == []
        )
        [heal] = session.scalars(select(ResourceHeal).where(ResourceHeal.action == "removed"))
        assert (heal.consumer_uuid, heal.reason) == (uuid, "instance is deleted")
        view = {"domains": []}
        assert audit_nodes(session, {"host1": view})["leaks"] == 0


def test_releasing_an_orphan_count_leaves_a_live_guests_alone(
    db_url: str, hypervisor: SimulatedHostDriver
) -> None:
    live = host1_server(db_url, "active")
    spawn_guest(hypervisor, live)
    update_available_resource(sessions_for(db_url), hypervisor, "host1", make_settings())
    used = _memory_used(db_url)
    with session_scope(db_url) as session:
        assert release_destroyed_orphan(session, "host1", live) == []
    assert _memory_used(db_url) == used


def _memory_used(db_url: str) -> int:
    with session_scope(db_url) as session:
        return session.scalars(select(ComputeNode.memory_mb_used)).one()
