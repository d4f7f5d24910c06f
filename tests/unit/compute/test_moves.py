"""The move steps on fake hypervisors: states, allocations, PCI and the undo."""

from __future__ import annotations

from typing import Any

import pytest

from compute import moves
from compute.claims import ResourceRequest, consumer_allocations
from compute.delete import local_delete
from compute.instance_actions import start_action
from compute.instance_state import get_instance
from compute.sessions import sessions_for
from models.db import session_scope
from models.flavor import FlavorSnapshot
from novaq.exceptions import HypervisorError
from tests.factories import (
    claim,
    flavor_dict,
    host_resources,
    make_compute_node,
    make_instance,
    request_resize,
    set_migration_status,
)
from virt.driver import GuestSpec
from virt.fake import FakeDriver

OLD, NEW = flavor_dict(1, 1024, 1), flavor_dict(2, 2048, 2)


def _setup(db_url: str, vm_state: str = "active") -> tuple[str, str, dict[str, FakeDriver]]:
    drivers = {h: FakeDriver(host_resources(h)) for h in ("src", "dst")}
    nodes = {h: make_compute_node(db_url, h) for h in drivers}
    uuid = make_instance(
        db_url,
        flavor=OLD,
        host="src",
        node="src",
        vm_state=vm_state,
        task_state="resize_prep",
        request_spec={"flavor": OLD},
    )
    claim(db_url, nodes["src"], uuid, ResourceRequest.from_flavor(FlavorSnapshot.load(OLD)))
    drivers["src"].spawn(GuestSpec(uuid=uuid, name="i", vcpus=1, memory_mb=1024, root_gb=1))
    migration_uuid = request_resize(db_url, uuid, OLD, NEW, "src", "req-test")
    return uuid, migration_uuid, drivers


def _ctx(
    db_url: str, migration: str, drivers: dict[str, FakeDriver], host: str
) -> moves.MoveContext:
    return moves.MoveContext(
        sessions_for(db_url), drivers[host], host, "req-test", migration_uuid=migration
    )


def _held(db_url: str, consumer: str) -> dict[str, int]:
    with session_scope(db_url) as session:
        return consumer_allocations(session, consumer)


def _state(db_url: str, uuid: str) -> tuple[Any, ...]:
    with session_scope(db_url) as session:
        i = get_instance(session, uuid)
        return i.vm_state, i.task_state, i.host, i.flavor.vcpus


def _forward(db_url: str, migration: str, drivers: dict[str, FakeDriver]) -> None:
    moves.prep_resize(_ctx(db_url, migration, drivers, "dst"))
    moves.resize_instance(_ctx(db_url, migration, drivers, "src"))
    moves.finish_resize(_ctx(db_url, migration, drivers, "dst"))


def test_the_forward_path_ends_in_verify_resize_on_the_destination(db_url: str) -> None:
    uuid, migration, drivers = _setup(db_url)
    assert _held(db_url, migration) == {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 1}
    _forward(db_url, migration, drivers)
    assert _state(db_url, uuid) == ("resized", None, "dst", 2)
    assert drivers["src"].list_instance_uuids() == [] and drivers["dst"].get_info(uuid).vcpus == 2


def test_a_redelivered_step_resumes_instead_of_sticking(db_url: str) -> None:
    uuid, migration, drivers = _setup(db_url)
    moves.prep_resize(_ctx(db_url, migration, drivers, "dst"))
    moves.resize_instance(_ctx(db_url, migration, drivers, "src"))
    with session_scope(db_url) as session:  # the worker died inside finish_resize
        get_instance(session, uuid).task_state = "resize_finish"
    moves.finish_resize(_ctx(db_url, migration, drivers, "dst"))
    assert _state(db_url, uuid) == ("resized", None, "dst", 2)


def test_confirm_frees_the_source_and_revert_gives_it_back(db_url: str) -> None:
    uuid, migration, drivers = _setup(db_url)
    _forward(db_url, migration, drivers)
    with session_scope(db_url) as session:
        set_migration_status(session, migration, "reverting")
        get_instance(session, uuid).task_state = "resize_reverting"
    moves.revert_resize(_ctx(db_url, migration, drivers, "dst"))
    moves.finish_revert_resize(_ctx(db_url, migration, drivers, "src"))
    assert _state(db_url, uuid) == ("active", None, "src", 1)
    assert _held(db_url, uuid) == {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 1}
    assert _held(db_url, migration) == {}
    assert drivers["dst"].list_instance_uuids() == [] and drivers["src"].get_info(uuid).vcpus == 1
    # The destination the server left keeps no instance files (Nova's revert cleanup).
    assert not drivers["dst"].instance_files_exist(uuid)
    assert drivers["src"].instance_files_exist(uuid)


def test_a_stopped_server_stays_stopped_through_a_resize(db_url: str) -> None:
    uuid, migration, drivers = _setup(db_url, vm_state="stopped")
    _forward(db_url, migration, drivers)
    assert drivers["dst"].get_info(uuid).power_state == 4
    with session_scope(db_url) as session:
        set_migration_status(session, migration, "confirming")
        # api.confirm_resize starts an action of its own (the resize's has ended).
        start_action(session, uuid, "confirmResize", "req-test")
    moves.confirm_resize(_ctx(db_url, migration, drivers, "src"))
    assert _state(db_url, uuid)[0] == "stopped"
    # The source the server left keeps no instance files (Nova's _cleanup_resize).
    assert not drivers["src"].instance_files_exist(uuid)
    assert drivers["dst"].instance_files_exist(uuid)


@pytest.mark.parametrize("failed_after", ["prep", "resize"])
def test_abort_puts_the_accounting_where_the_instance_is(db_url: str, failed_after: str) -> None:
    uuid, migration, drivers = _setup(db_url)
    moves.prep_resize(_ctx(db_url, migration, drivers, "dst"))
    if failed_after == "resize":
        moves.resize_instance(_ctx(db_url, migration, drivers, "src"))
    assert moves.abort_move(sessions_for(db_url), migration, HypervisorError(reason="boom"), "dst")
    assert not moves.abort_move(
        sessions_for(db_url), migration, HypervisorError(reason="boom"), "dst"
    )
    vm_state, task_state, host, vcpus = _state(db_url, uuid)
    assert (vm_state, task_state) == ("error", None)
    assert _held(db_url, migration) == {}
    if failed_after == "prep":
        assert (host, vcpus) == ("src", 1) and _held(db_url, uuid)["VCPU"] == 1
    else:
        assert (host, vcpus) == ("dst", 2) and _held(db_url, uuid)["VCPU"] == 2


def test_prep_failure_moves_the_destination_claim_to_an_alternate(db_url: str) -> None:
    uuid, migration, drivers = _setup(db_url)
    third = make_compute_node(db_url, "alt")
    moved = moves.reschedule_move(
        sessions_for(db_url),
        migration,
        (("alt", "alt", third),),
        HypervisorError(reason="prep failed"),
        "dst",
    )
    assert moved is not None and moved[0][0] == "alt"
    with session_scope(db_url) as session:
        assert moves.get_migration(session, migration).dest_compute == "alt"
        assert consumer_allocations(session, uuid, third)["VCPU"] == 2
    by_node = {}
    for host in ("dst", "alt"):
        with session_scope(db_url) as session:
            from compute.resource_tracker import get_node

            by_node[host] = get_node(session, host, host).vcpus_used  # type: ignore[union-attr]
    assert by_node == {"dst": 0, "alt": 2}


def test_a_server_deleted_before_the_reschedule_claims_no_alternate(db_url: str) -> None:
    """The leak soak's race: prep_resize fails because the server was deleted meanwhile;
    its reschedule must not claim the alternate for the deleted server."""
    uuid, migration, _ = _setup(db_url)
    third = make_compute_node(db_url, "alt")
    local_delete(sessions_for(db_url), uuid, "req-delete")

    moved = moves.reschedule_move(
        sessions_for(db_url),
        migration,
        (("alt", "alt", third),),
        HypervisorError(reason="prep failed"),
        "dst",
    )

    assert moved is None
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid, third) == {}
    assert _held(db_url, uuid) == {} and _held(db_url, migration) == {}


def test_a_revert_that_fails_restarting_the_guest_errors_the_server_out(db_url: str) -> None:
    uuid, migration, drivers = _setup(db_url)
    _forward(db_url, migration, drivers)
    with session_scope(db_url) as session:
        set_migration_status(session, migration, "reverting")
        get_instance(session, uuid).task_state = "resize_reverting"
    moves.revert_resize(_ctx(db_url, migration, drivers, "dst"))  # accounting back on src
    assert moves.abort_move(
        sessions_for(db_url), migration, HypervisorError(reason="no start"), "src"
    )
    assert _state(db_url, uuid)[:2] == ("error", None)
    assert _held(db_url, uuid) == {"VCPU": 1, "MEMORY_MB": 1024, "DISK_GB": 1}
    assert not moves.abort_move(
        sessions_for(db_url), migration, HypervisorError(reason="again"), "src"
    )


def _resize_action(db_url: str, uuid: str) -> tuple[bool, str | None, list[Any]]:
    from compute.instance_actions import _action

    with session_scope(db_url) as session:
        action = _action(session, uuid, "req-test")
        assert action is not None
        events = [(e.event, e.result) for e in action.events]
        return action.finish_time is not None, action.message, events


def test_a_failed_prep_resize_leaves_the_move_s_action_open_for_what_ends_the_move(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prep_resize may be rescheduled to an alternate: its failure closes its event, not
    the move's action; the move's end (here its undo, ``abort_move``) records that."""
    uuid, migration, drivers = _setup(db_url)

    def broken() -> Any:
        raise HypervisorError(reason="prep failed")

    monkeypatch.setattr(drivers["dst"], "get_available_resource", broken)
    with pytest.raises(HypervisorError):
        moves.prep_resize(_ctx(db_url, migration, drivers, "dst"))
    assert _resize_action(db_url, uuid) == (False, "Error", [("compute_prep_resize", "Error")])
    assert moves.abort_move(sessions_for(db_url), migration, HypervisorError(reason="x"), "dst")
    assert _resize_action(db_url, uuid)[:2] == (True, "Error")


def test_the_forward_path_ends_the_move_s_action_at_verify_resize(db_url: str) -> None:
    uuid, migration, drivers = _setup(db_url)
    moves.prep_resize(_ctx(db_url, migration, drivers, "dst"))
    moves.resize_instance(_ctx(db_url, migration, drivers, "src"))
    assert _resize_action(db_url, uuid)[0] is False  # still under way
    moves.finish_resize(_ctx(db_url, migration, drivers, "dst"))
    assert _resize_action(db_url, uuid)[:2] == (True, None)
