"""Recovery at worker start (``compute.recovery.init_host``, Nova's ``init_host``): each row of the
table in its docstring on real SQLite rows and a fresh libvirt ``test:///`` node (the
moves on the fake hypervisors their own tests use), and what the late-acked message of
the interrupted step does afterwards."""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from compute import lifecycle, moves
from compute.claims import ResourceRequest, consumer_allocations
from compute.instance_actions import latest_fault, start_action, start_event
from compute.instance_state import get_instance
from compute.recovery.init_host import INIT_HOST_EVENT, recover_host
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import InstanceAction, InstanceActionEvent, utcnow
from models.db import session_scope
from models.flavor import FlavorSnapshot
from tests.factories import (
    claim,
    flavor_dict,
    host_resources,
    make_compute_node,
    make_instance,
    make_settings,
    request_resize,
    set_migration_status,
)
from virt import power_state
from virt.driver import GuestSpec
from virt.fake import FakeDriver
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.node_xml import test_uri, write_node_xml


def _placed(db_url: str, node_id: int, **state: object) -> str:
    uuid = make_instance(db_url, host="host1", node="host1", **state)
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid


def test_an_interrupted_build_is_errored_out_and_its_guest_destroyed(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1")
    driver = FakeDriver(host_resources("host1"))
    uuid = _placed(db_url, node_id, task_state="spawning")
    with session_scope(db_url) as session:  # the build step's event, left open by the crash
        start_action(session, uuid, "create", "req-boot")
        start_event(session, uuid, "req-boot", "compute__do_build_and_run_instance", "host1")
    driver.spawn(GuestSpec(uuid=uuid, name="half-built", vcpus=1, memory_mb=512, root_gb=1))
    assert recover_host(sessions_for(db_url), driver, "host1") == [
        f"{uuid}: interrupted build -> ERROR"
    ]
    assert driver.list_instance_uuids() == []
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.host) == ("error", None, None)
        assert consumer_allocations(session, uuid) == {}
        events = session.scalars(select(InstanceActionEvent)).all()
        assert {(e.event, e.result) for e in events if e.event != "compute_init_host"} == {
            ("compute__do_build_and_run_instance", "Error")
        }


def test_a_build_still_queued_for_this_host_is_left_to_its_message(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1")
    uuid = _placed(db_url, node_id, task_state="scheduling")
    assert recover_host(sessions_for(db_url), FakeDriver(host_resources("host1")), "host1") == []
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).task_state == "scheduling"


def test_an_interrupted_delete_is_completed(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1")
    driver = FakeDriver(host_resources("host1"))
    uuid = _placed(db_url, node_id, vm_state="active", task_state="deleting")
    driver.spawn(GuestSpec(uuid=uuid, name="dying", vcpus=1, memory_mb=512, root_gb=1))
    recover_host(sessions_for(db_url), driver, "host1")
    assert driver.list_instance_uuids() == []
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).vm_state == "deleted"
        assert consumer_allocations(session, uuid) == {}


# -- every row of Nova's _init_instance, on a real test:/// host -------------------------------
#
# Each instance is on host1 with its claim, in the state a crash left it in, with the
# action that put it there as its latest (the re-run steps record their events on it).

REQUEST = "req-interrupted"
RUNNING, PAUSED, SHUTDOWN = power_state.RUNNING, power_state.PAUSED, power_state.SHUTDOWN
SUSPENDED = -1  # a test-only marker: the guest managed-saved (it then reports SHUTDOWN)


@pytest.fixture
def hypervisor(tmp_path: Path) -> Iterator[LibvirtDriver]:
    node = write_node_xml(HostProfile("host1", vcpus=64, memory_mb=262144), tmp_path / "node")
    driver = LibvirtDriver(test_uri(node), instances_path=tmp_path / "instances")
    driver.init_host("host1")
    yield driver
    driver.close()


@pytest.fixture
def node_id(db_url: str) -> int:
    return make_compute_node(db_url, "host1")


def _server(db_url: str, node_id: int, vm_state: str, task_state: str | None, **state: Any) -> str:
    values: dict[str, Any] = dict(
        host="host1",
        node="host1",
        vm_state=vm_state,
        task_state=task_state,
        power_state=RUNNING,
        launched_at=utcnow(),
        request_id="req-create",
    )
    values.update(state)
    uuid = make_instance(db_url, **values)
    with session_scope(db_url) as session:
        start_action(session, uuid, "interrupted", REQUEST)
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid


def _guest(driver: LibvirtDriver, uuid: str, power: int | None = RUNNING) -> None:
    """The guest as the crash left it: running, paused, off, suspended (managed save)
    or, for ``None``, absent."""
    if power is None:
        return
    driver.spawn(GuestSpec(uuid=uuid, name=f"guest-{uuid[:8]}", vcpus=1, memory_mb=64, root_gb=1))
    if power == SHUTDOWN:
        driver.power_off(uuid)
    elif power == PAUSED:
        driver.pause(uuid)
    elif power == SUSPENDED:
        driver.suspend(uuid)


def _state(db_url: str, uuid: str) -> tuple[Any, ...]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        return instance.vm_state, instance.task_state


def _power(driver: LibvirtDriver, uuid: str) -> int | None:
    return driver.get_info(uuid).power_state if driver.instance_exists(uuid) else None


def _events(db_url: str, uuid: str) -> list[tuple[str, str | None]]:
    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction).where(
                InstanceAction.instance_uuid == uuid, InstanceAction.request_id == REQUEST
            )
        ).one()
        return [(e.event, e.result) for e in action.events]


def _finished(db_url: str, uuid: str) -> bool:
    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction).where(
                InstanceAction.instance_uuid == uuid, InstanceAction.request_id == REQUEST
            )
        ).one()
        return action.finish_time is not None


#: The operation ended at start-up where it was going (task cleared), or was cut short.
ENDED, CUT = "ended", "cut"


@pytest.mark.parametrize(
    ("vm_state", "task_state", "guest", "final", "guest_after", "event"),
    [
        # Nova's rows.
        ("active", "powering-off", RUNNING, ("stopped", None), SHUTDOWN, "stop"),
        ("stopped", "powering-on", SHUTDOWN, ("active", None), RUNNING, "start"),
        ("active", "reboot_pending", RUNNING, ("active", None), RUNNING, "reboot"),
        ("active", "reboot_started", SHUTDOWN, ("active", None), RUNNING, "reboot"),
        ("stopped", "reboot_pending_hard", SHUTDOWN, ("active", None), RUNNING, "reboot"),
        ("active", "reboot_started_hard", RUNNING, ("active", None), RUNNING, ENDED),
        ("active", "pausing", RUNNING, ("active", None), RUNNING, CUT),
        ("paused", "unpausing", RUNNING, ("active", None), RUNNING, ENDED),
        ("paused", "unpausing", PAUSED, ("active", None), RUNNING, "unpause"),
        ("active", "soft-deleting", RUNNING, ("soft-delete", None), SHUTDOWN, "soft_delete"),
        # Where Nova is silent: the guest already there -> finished; else not happened.
        ("active", "pausing", PAUSED, ("paused", None), PAUSED, "pause"),
        ("active", "suspending", SUSPENDED, ("suspended", None), SHUTDOWN, "suspend"),
        ("active", "suspending", RUNNING, ("active", None), RUNNING, CUT),
        ("suspended", "resuming", RUNNING, ("active", None), RUNNING, "resume"),
        ("suspended", "resuming", SUSPENDED, ("suspended", None), SHUTDOWN, CUT),
        # Rescue boots a rescue domain: the step is re-run whatever the power state.
        ("active", "rescuing", SHUTDOWN, ("rescued", None), RUNNING, "rescue"),
        ("active", "rescuing", RUNNING, ("rescued", None), RUNNING, "rescue"),
        ("rescued", "unrescuing", RUNNING, ("active", None), RUNNING, "unrescue"),
        ("rescued", "unrescuing", SHUTDOWN, ("rescued", None), SHUTDOWN, CUT),
        ("active", "shelving", RUNNING, ("active", None), RUNNING, CUT),
    ],
)
def test_an_interrupted_operation_ends_in_the_state_nova_gives_it(
    db_url: str,
    node_id: int,
    hypervisor: LibvirtDriver,
    vm_state: str,
    task_state: str,
    guest: int,
    final: tuple[str, str | None],
    guest_after: int,
    event: str | None,
) -> None:
    uuid = _server(db_url, node_id, vm_state, task_state)
    _guest(hypervisor, uuid, guest)
    [line] = recover_host(sessions_for(db_url), hypervisor, "host1")
    assert line.startswith(uuid)
    assert _state(db_url, uuid) == final
    assert _power(hypervisor, uuid) == guest_after
    if event in (ENDED, CUT):  # recovery ended the operation: its action says how
        expected = [("compute_init_host", "Success" if event == ENDED else "Error")]
    else:
        expected = [(f"compute_{event}_instance", "Success")]
    assert _events(db_url, uuid) == expected
    assert _finished(db_url, uuid), "every interrupted operation's action records its end"


def test_a_redelivered_step_after_recovery_is_skipped_and_changes_nothing(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _server(db_url, node_id, "active", "powering-off")
    _guest(hypervisor, uuid)
    recover_host(sessions_for(db_url), hypervisor, "host1")
    hypervisor.power_on(uuid)  # so a stop that ran again would show
    # The late-acked message of the interrupted stop comes back after the restart.
    assert (
        lifecycle.stop_instance(
            StepContext(sessions_for(db_url), hypervisor, "host1", REQUEST), uuid
        )
        == "skipped"
    )
    assert _state(db_url, uuid) == ("stopped", None)
    assert _power(hypervisor, uuid) == RUNNING


def test_a_soft_reboot_whose_guest_runs_is_left_to_its_message_as_nova_does(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _server(db_url, node_id, "active", "rebooting")
    _guest(hypervisor, uuid)
    assert recover_host(sessions_for(db_url), hypervisor, "host1") == []
    assert _state(db_url, uuid) == ("active", "rebooting")
    assert (
        lifecycle.reboot_instance(
            StepContext(sessions_for(db_url), hypervisor, "host1", REQUEST), uuid
        )
        == "done"
    )
    assert _state(db_url, uuid) == ("active", None)


def test_a_soft_reboot_caught_with_its_guest_down_becomes_a_hard_one(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _server(db_url, node_id, "active", "reboot_started")
    _guest(hypervisor, uuid, SHUTDOWN)
    [line] = recover_host(sessions_for(db_url), hypervisor, "host1")
    assert "reboot re-issued (hard, done)" in line
    # The soft reboot's own message, redelivered, no longer owns the instance.
    assert (
        lifecycle.reboot_instance(
            StepContext(sessions_for(db_url), hypervisor, "host1", REQUEST), uuid
        )
        == "skipped"
    )


@pytest.mark.parametrize(("offload_time", "final"), [(0, "shelved_offloaded"), (-1, "shelved")])
def test_a_shelve_whose_guest_is_already_off_is_finished(
    db_url: str, node_id: int, hypervisor: LibvirtDriver, offload_time: int, final: str
) -> None:
    uuid = _server(db_url, node_id, "active", "shelving")
    _guest(hypervisor, uuid, SHUTDOWN)
    settings = make_settings(shelved_offload_time=offload_time)
    recover_host(sessions_for(db_url), hypervisor, "host1", settings=settings)
    assert _state(db_url, uuid) == (final, None)
    assert hypervisor.instance_exists(uuid) is (final == "shelved")


def test_an_offload_caught_half_way_is_completed(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    # shelve with shelved_offload_time 0 died in its offload half: its redelivered
    # message would be skipped (it begins from "shelving" only).
    uuid = _server(db_url, node_id, "shelved", "shelving_offloading", power_state=SHUTDOWN)
    _guest(hypervisor, uuid, SHUTDOWN)
    [line] = recover_host(sessions_for(db_url), hypervisor, "host1")
    assert line == f"{uuid}: interrupted shelving_offloading re-run (done)"
    assert _state(db_url, uuid) == ("shelved_offloaded", None)
    assert not hypervisor.instance_exists(uuid)
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).host is None
        assert consumer_allocations(session, uuid) == {}


def test_an_unshelve_caught_mid_spawn_is_errored_out_like_a_build(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    uuid = _server(db_url, node_id, "shelved_offloaded", "spawning", power_state=0)
    _guest(hypervisor, uuid)  # half spawned
    assert recover_host(sessions_for(db_url), hypervisor, "host1") == [
        f"{uuid}: interrupted unshelve -> ERROR"
    ]
    assert not hypervisor.instance_exists(uuid)
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state, instance.host) == ("error", None, None)
        assert consumer_allocations(session, uuid) == {}
        fault = latest_fault(session, uuid)
        assert fault is not None and fault.message.endswith("interrupted by a restart of host1")
    assert _events(db_url, uuid) == [(INIT_HOST_EVENT, "Error")]


@pytest.mark.parametrize(
    ("vm_state", "task_state"),
    [
        ("soft-delete", "restoring"),  # Nova leaves SOFT_DELETED alone
        ("error", "powering-off"),  # and ERROR, but for deleting / resize_migrating
        ("shelved", "unshelving"),  # the unshelve's scheduler step is still to come
        ("shelved_offloaded", "unshelving"),  # its host step is queued here
        ("building", "scheduling"),
    ],
)
def test_states_left_to_their_messages(
    db_url: str, node_id: int, hypervisor: LibvirtDriver, vm_state: str, task_state: str
) -> None:
    uuid = _server(db_url, node_id, vm_state, task_state)
    _guest(hypervisor, uuid)
    assert recover_host(sessions_for(db_url), hypervisor, "host1") == []
    assert _state(db_url, uuid) == (vm_state, task_state)
    assert _power(hypervisor, uuid) == RUNNING


def test_one_failed_recovery_does_not_stop_the_others(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    lost = _server(db_url, node_id, "stopped", "powering-on")  # its guest is gone
    fine = _server(db_url, node_id, "active", "powering-off")
    _guest(hypervisor, fine)
    lines = recover_host(sessions_for(db_url), hypervisor, "host1")
    assert lines[0].startswith(f"{lost}: powering-on recovery failed")
    assert _state(db_url, lost) == ("stopped", None)  # the start step's own undo
    assert _state(db_url, fine) == ("stopped", None)


# -- moves: left to their redelivered messages while the migration is in progress ---------------

OLD, NEW = flavor_dict(1, 512, 1), flavor_dict(2, 1024, 1)


def _move(db_url: str, task_state: str, status: str | None) -> tuple[str, str, dict[str, Any]]:
    """A resize from src to dst at ``task_state``, with its migration in ``status``
    (None: no migration row at all) and the destination claimed."""
    drivers = {h: FakeDriver(host_resources(h)) for h in ("src", "dst")}
    nodes = {h: make_compute_node(db_url, h) for h in drivers}
    uuid = make_instance(
        db_url,
        flavor=OLD,
        host="src",
        node="src",
        vm_state="active",
        task_state="resize_prep",  # the API's, until the steps move it
        power_state=RUNNING,
        request_spec={"flavor": OLD},
        system_metadata={"old_vm_state": "active"},
    )
    claim(db_url, nodes["src"], uuid, ResourceRequest.from_flavor(FlavorSnapshot.load(OLD)))
    drivers["src"].spawn(GuestSpec(uuid=uuid, name="i", vcpus=1, memory_mb=512, root_gb=1))
    migration_uuid = str(uuid_module.uuid4())
    if status is not None:
        request_resize(db_url, uuid, OLD, NEW, "src", "req-resize", uuid=migration_uuid)
        with session_scope(db_url) as session:
            set_migration_status(session, migration_uuid, status)
    with session_scope(db_url) as session:
        get_instance(session, uuid).task_state = task_state
    return uuid, migration_uuid, drivers


def _step_ctx(db_url: str, migration: str, drivers: dict[str, Any], host: str) -> Any:
    return moves.MoveContext(
        sessions_for(db_url), drivers[host], host, "req-resize", migration_uuid=migration
    )


def test_a_resize_caught_in_resize_instance_is_left_to_its_redelivery_which_resumes(
    db_url: str,
) -> None:
    uuid, migration, drivers = _move(db_url, "resize_prep", "pre-migrating")
    moves.prep_resize(_step_ctx(db_url, migration, drivers, "dst"))
    with session_scope(db_url) as session:  # resize_instance died after its first write
        get_instance(session, uuid).task_state = "resize_migrating"
        set_migration_status(session, migration, "migrating")
    assert recover_host(sessions_for(db_url), drivers["src"], "src") == []
    assert _state(db_url, uuid) == ("active", "resize_migrating")
    moves.resize_instance(_step_ctx(db_url, migration, drivers, "src"))  # redelivered
    moves.finish_resize(_step_ctx(db_url, migration, drivers, "dst"))
    assert _state(db_url, uuid) == ("resized", None)


def test_a_resize_waiting_in_resize_prep_is_left_to_its_messages(db_url: str) -> None:
    uuid, migration, drivers = _move(db_url, "resize_prep", "pre-migrating")
    assert recover_host(sessions_for(db_url), drivers["src"], "src") == []
    moves.prep_resize(_step_ctx(db_url, migration, drivers, "dst"))  # the queued messages
    moves.resize_instance(_step_ctx(db_url, migration, drivers, "src"))
    assert _state(db_url, uuid) == ("active", "resize_migrated")


def _move_ended(db_url: str, uuid: str) -> tuple[bool, str | None]:
    """Whether the move's action (req-resize) records its end, and how."""
    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction).where(
                InstanceAction.instance_uuid == uuid, InstanceAction.request_id == "req-resize"
            )
        ).one()
        return action.finish_time is not None, action.message


def test_resize_prep_with_no_move_in_progress_is_cleared(db_url: str) -> None:
    uuid, _, drivers = _move(db_url, "resize_prep", None)
    with session_scope(db_url) as session:
        start_action(session, uuid, "resize", "req-resize")
    assert recover_host(sessions_for(db_url), drivers["src"], "src") == [
        f"{uuid}: resize_prep -> task cleared"
    ]
    assert _state(db_url, uuid) == ("active", None)
    assert _move_ended(db_url, uuid) == (True, "Error")  # the move ended here, cut short


@pytest.mark.parametrize(("old_vm_state", "power"), [("active", RUNNING), ("stopped", SHUTDOWN)])
def test_resize_migrating_with_no_move_in_progress_brings_the_guest_back_on_the_source(
    db_url: str, old_vm_state: str, power: int
) -> None:
    uuid, _, drivers = _move(db_url, "resize_migrating", "error")
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        instance.vm_state = "error" if old_vm_state == "active" else old_vm_state
        instance.system_metadata = {"old_vm_state": old_vm_state}
    drivers["src"].destroy(uuid)  # the resize had taken it down
    [line] = recover_host(sessions_for(db_url), drivers["src"], "src")
    assert line == f"{uuid}: interrupted resize reverted on src"
    assert drivers["src"].get_info(uuid).power_state == power
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.task_state, instance.power_state) == (None, power)
        assert "old_vm_state" not in instance.system_metadata
    assert _move_ended(db_url, uuid) == (True, "Error")


# -- resume_guests_state_on_host_boot, and guests of deleted servers at start -----------------


@pytest.mark.parametrize("guest", [SHUTDOWN, None])
def test_resume_guests_state_on_host_boot_starts_what_the_database_says_ran(
    db_url: str, node_id: int, hypervisor: LibvirtDriver, guest: int | None
) -> None:
    uuid = _server(db_url, node_id, "active", None)  # power_state RUNNING in the database
    _guest(hypervisor, uuid, guest)
    assert recover_host(sessions_for(db_url), hypervisor, "host1", settings=make_settings()) == []
    assert _power(hypervisor, uuid) == guest  # off by default, as Nova's
    settings = make_settings(resume_guests_state_on_host_boot=True)
    assert recover_host(sessions_for(db_url), hypervisor, "host1", settings=settings) == [
        f"{uuid}: guest resumed (resume_guests_state_on_host_boot)"
    ]
    assert _power(hypervisor, uuid) == RUNNING


def test_resume_leaves_a_stopped_server_and_a_paused_guest_alone(
    db_url: str, node_id: int, hypervisor: LibvirtDriver
) -> None:
    stopped = _server(db_url, node_id, "stopped", None, power_state=SHUTDOWN)
    _guest(hypervisor, stopped, SHUTDOWN)
    paused = _server(db_url, node_id, "active", None)
    _guest(hypervisor, paused, PAUSED)
    settings = make_settings(resume_guests_state_on_host_boot=True)
    assert recover_host(sessions_for(db_url), hypervisor, "host1", settings=settings) == []
    assert (_power(hypervisor, stopped), _power(hypervisor, paused)) == (SHUTDOWN, PAUSED)


@pytest.mark.parametrize(
    ("action", "left"), [("reap", None), ("shutdown", SHUTDOWN), ("log", RUNNING)]
)
def test_guests_of_deleted_servers_are_handled_at_start_per_running_deleted_instance_action(
    db_url: str, hypervisor: LibvirtDriver, action: str, left: int | None
) -> None:
    uuid = make_instance(
        db_url, host="host1", node="host1", vm_state="deleted", task_state=None, deleted=1
    )
    _guest(hypervisor, uuid)  # deleted while this host was down
    assert (
        recover_host(sessions_for(db_url), hypervisor, "host1") == []
    )  # no settings: left to the task
    settings = make_settings(running_deleted_instance_action=action)
    assert recover_host(sessions_for(db_url), hypervisor, "host1", settings=settings) == [
        f"{uuid}: deleted but on the hypervisor -> {action}"
    ]
    assert _power(hypervisor, uuid) == left


def test_an_interrupted_stop_is_rerun_with_the_configured_shutdown_timeout(
    db_url: str, node_id: int
) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, node_id, "active", "powering-off")
    driver.spawn(GuestSpec(uuid=uuid, name="i-1", vcpus=1, memory_mb=512, root_gb=1))
    recover_host(sessions_for(db_url), driver, "host1", settings=make_settings(shutdown_timeout=7))
    assert driver.power_off_timeouts == [(uuid, 7)]
    assert _state(db_url, uuid) == ("stopped", None)
