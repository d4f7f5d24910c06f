"""Rebuild and evacuate through the public API and the ``novaq`` command: Nova's states
through a real in-thread worker on libvirt test:///, and every bad request refused with a
clear error before anything is written or sent."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from compute import instance_actions as actions
from compute import notifications
from compute.claims import consumer_allocations
from compute.instance_state import get_instance
from models import Image, Migration, Service
from models.db import session_scope
from novaq.cli import main
from novaq.exceptions import (
    ComputeHostNotFound,
    ComputeServiceInUse,
    FlavorDiskSmallerThanImage,
    FlavorDiskSmallerThanMinDisk,
    FlavorMemoryTooSmall,
    ImageNotActive,
    ImageNotFound,
    InstanceInvalidState,
    InstanceNotFound,
    InvalidInput,
)
from tasks.rebuild import on_rebuild_error
from tests.factories import make_compute_node, make_image_ref, make_instance, set_last_seen_up
from tests.unit.workflows.servers import (
    action_count,
    boot_active,
    clear_queues,
    placed_server,
    queued,
)
from workflows import api
from workflows.gate import InstanceHostDown, InstanceIsLocked

QUEUES = ("scheduler", "compute.host1", "compute.host2")


@pytest.fixture
def no_messages() -> Iterator[None]:
    clear_queues(*QUEUES)
    yield
    clear_queues(*QUEUES)


@pytest.fixture
def booted(worker: None) -> Iterator[list[str]]:
    """Servers booted through the worker, deleted after the test whatever it left them in
    (so no guest outlives its test and takes the next one's domain name)."""
    uuids: list[str] = []
    yield uuids
    for uuid in uuids:
        if api.show(uuid)["status"] != "DELETED":
            api.delete(uuid)
        _wait_deleted(uuid)


def _boot(booted: list[str], name: str) -> str:
    uuid = boot_active(name)
    booted.append(uuid)
    return uuid


def _wait_deleted(uuid: str, timeout_s: float = 30) -> None:
    """Until DELETED (``api.wait`` would stop at an ERROR the test left)."""
    deadline = time.monotonic() + timeout_s
    while api.show(uuid)["status"] != "DELETED" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert api.show(uuid)["status"] == "DELETED"


def _nothing_written(db_url: str) -> tuple[int, int, int]:
    with session_scope(db_url) as session:
        migrations = len(session.scalars(select(Migration)).all())
    return queued(*QUEUES), action_count(db_url), migrations


def _image(db_url: str, name: str, **values: Any) -> str:
    ref = make_image_ref(db_url, name)
    if values:
        with session_scope(db_url) as session:
            session.execute(update(Image).where(Image.id == ref).values(**values))
    return ref


def _set_host_down(db_url: str, host: str, forced: bool = False) -> None:
    values: dict[str, Any] = (
        {"forced_down": True} if forced else {"created_at": dt.datetime(2000, 1, 1)}
    )
    if not forced:
        set_last_seen_up(db_url, dt.datetime(2000, 1, 1), host)
    with session_scope(db_url) as session:
        session.execute(update(Service).where(Service.host == host).values(**values))


# -- rebuild through the worker -------------------------------------------------------------


def test_rebuild_gives_the_server_a_new_guest_from_the_new_image(
    db_url: str, booted: list[str]
) -> None:
    uuid = _boot(booted, "rb1")
    fedora = _image(db_url, "fedora")
    before = api.show(uuid)
    with session_scope(db_url) as session:
        held = consumer_allocations(session, uuid)

    api.rebuild(uuid, "fedora")
    view = api.wait(uuid, "ACTIVE", timeout=30)

    assert (view["vm_state"], view["task_state"], view["host"]) == ("active", None, "host1")
    assert view["launched_at"] >= before["launched_at"]
    assert api.diagnostics(uuid)["power_state"] == 1
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert instance.image_ref == fedora
        assert instance.system_metadata["image_base_image_ref"] == fedora
        assert instance.request_spec["image"] == fedora
        assert consumer_allocations(session, uuid) == held  # Nova's NopClaim
    [action] = [a for a in api.list_actions(uuid) if a["action"] == "rebuild"]
    assert [e["event"] for e in action["events"]] == ["compute_rebuild_instance"]
    assert action["events"][0]["result"] == "Success"


def test_a_stopped_server_stays_stopped_after_rebuild(db_url: str, booted: list[str]) -> None:
    uuid = _boot(booted, "rb2")
    api.stop(uuid)
    api.wait(uuid, "SHUTOFF", timeout=30)
    _image(db_url, "fedora")

    api.rebuild("rb2", "fedora")  # by name
    view = api.wait(uuid, "SHUTOFF", timeout=30)

    assert (view["vm_state"], view["task_state"]) == ("stopped", None)
    assert api.diagnostics(uuid)["power_state"] == 4


def test_rebuild_passes_through_novas_task_states(db_url: str, booted: list[str]) -> None:
    """Every task_state the instance takes on its way, as Nova's (sampled from the rows)."""
    uuid = _boot(booted, "rb3")
    seen: list[Any] = []
    api.rebuild(uuid, "cirros")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = api.show(uuid)
        if not seen or seen[-1] != view["task_state"]:
            seen.append(view["task_state"])
        if view["task_state"] is None:
            break
    assert seen[0] in ("rebuilding", "rebuild_block_device_mapping", "rebuild_spawning")
    assert seen[-1] is None
    order = ["rebuilding", "rebuild_block_device_mapping", "rebuild_spawning", None]
    assert [order.index(s) for s in seen] == sorted(order.index(s) for s in seen)


def test_the_cli_rebuilds_and_waits(db_url: str, booted: list[str]) -> None:
    uuid = _boot(booted, "rb4")
    _image(db_url, "fedora")
    result = CliRunner().invoke(main, ["rebuild", "rb4", "--image", "fedora", "--wait", "30"])
    assert result.exit_code == 0, result.output
    assert "accepted" in result.output and f"Server {uuid} is ACTIVE on host1" in result.output


# -- rebuild refused ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"status": "queued"}, ImageNotActive),
        ({"min_ram": 4096}, FlavorMemoryTooSmall),
        ({"min_disk": 50}, FlavorDiskSmallerThanMinDisk),
        ({"virtual_size": 20 * 1024**3}, FlavorDiskSmallerThanImage),
    ],
)
def test_an_image_the_flavor_cannot_boot_is_refused(
    db_url: str, no_messages: None, values: dict[str, Any], error: type[Exception]
) -> None:
    uuid = placed_server(db_url, request_spec={}, system_metadata={})
    _image(db_url, "big", **values)
    before = _nothing_written(db_url)

    with pytest.raises(error):
        api.rebuild(uuid, "big")

    assert _nothing_written(db_url) == before
    assert api.show(uuid)["task_state"] is None


def test_an_unknown_image_or_server_is_refused(db_url: str, no_messages: None) -> None:
    uuid = placed_server(db_url)
    before = _nothing_written(db_url)
    with pytest.raises(ImageNotFound):
        api.rebuild(uuid, "no-such-image")
    with pytest.raises(InstanceNotFound):
        api.rebuild("no-such-server", "cirros")
    assert _nothing_written(db_url) == before


@pytest.mark.parametrize(
    ("vm_state", "task_state"),
    [("paused", None), ("suspended", None), ("resized", None), ("active", "powering-off")],
)
def test_rebuild_in_a_state_nova_forbids_is_refused(
    db_url: str, no_messages: None, vm_state: str, task_state: str | None
) -> None:
    uuid = placed_server(db_url, vm_state, task_state=task_state)
    before = _nothing_written(db_url)
    with pytest.raises(InstanceInvalidState, match="rebuild"):
        api.rebuild(uuid, "cirros")
    assert _nothing_written(db_url) == before


def test_a_locked_server_or_a_down_host_refuses_rebuild(db_url: str, no_messages: None) -> None:
    locked = placed_server(db_url, system_metadata={"locked": "admin"})
    before = _nothing_written(db_url)
    with pytest.raises(InstanceIsLocked):
        api.rebuild(locked, "cirros")
    other = placed_server(db_url)
    before = _nothing_written(db_url)
    _set_host_down(db_url, "host1")
    with pytest.raises(InstanceHostDown):
        api.rebuild(other, "cirros")
    assert _nothing_written(db_url) == before


def test_a_name_matching_two_servers_is_refused(db_url: str, no_messages: None) -> None:
    placed_server(db_url, display_name="twin")
    placed_server(db_url, display_name="twin")
    before = _nothing_written(db_url)
    with pytest.raises(InvalidInput, match="2 servers are named 'twin'"):
        api.rebuild("twin", "cirros")
    with pytest.raises(InvalidInput, match="2 servers are named 'twin'"):
        api.evacuate("twin")
    assert _nothing_written(db_url) == before


# -- evacuate refused -----------------------------------------------------------------------


def test_evacuating_a_server_whose_host_is_up_is_refused(db_url: str, no_messages: None) -> None:
    uuid = placed_server(db_url)
    make_compute_node(db_url, "host2")
    before = _nothing_written(db_url)
    with pytest.raises(ComputeServiceInUse, match="Compute service of host1 is still in use"):
        api.evacuate(uuid)
    assert _nothing_written(db_url) == before
    assert api.show(uuid)["task_state"] is None


def test_evacuate_to_an_unknown_or_the_same_host_is_refused(db_url: str, no_messages: None) -> None:
    uuid = placed_server(db_url)
    _set_host_down(db_url, "host1", forced=True)
    before = _nothing_written(db_url)
    with pytest.raises(ComputeHostNotFound, match="host99"):
        api.evacuate(uuid, host="host99")
    with pytest.raises(InvalidInput, match="can't be the same"):
        api.evacuate(uuid, host="host1")
    assert _nothing_written(db_url) == before


@pytest.mark.parametrize(
    ("vm_state", "task_state"),
    [("paused", None), ("shelved", None), ("resized", None), ("stopped", "powering-on")],
)
def test_evacuate_in_a_state_nova_forbids_is_refused(
    db_url: str, no_messages: None, vm_state: str, task_state: str | None
) -> None:
    uuid = placed_server(db_url, vm_state, task_state=task_state)
    _set_host_down(db_url, "host1", forced=True)
    before = _nothing_written(db_url)
    with pytest.raises(InstanceInvalidState, match="evacuate"):
        api.evacuate(uuid)
    assert _nothing_written(db_url) == before


def test_a_never_launched_server_cannot_be_evacuated(db_url: str, no_messages: None) -> None:
    make_compute_node(db_url, "host1")
    uuid = make_instance(db_url, host="host1", node="host1", vm_state="error", task_state=None)
    _set_host_down(db_url, "host1", forced=True)
    with pytest.raises(InstanceInvalidState, match="never been launched"):
        api.evacuate(uuid)


def test_the_cli_reports_a_refused_evacuation(db_url: str, no_messages: None) -> None:
    uuid = placed_server(db_url)
    result = CliRunner().invoke(main, ["evacuate", uuid])
    assert result.exit_code == 1
    assert "ComputeServiceInUse" in result.output and "host1" in result.output
    result = CliRunner().invoke(main, ["evacuate", uuid, "--host", "host99"])
    assert result.exit_code == 1 and "host99" in result.output


def test_evacuate_of_a_forced_down_host_writes_the_evacuation_and_sends_the_scheduler_step(
    db_url: str, no_messages: None
) -> None:
    uuid = placed_server(db_url)
    make_compute_node(db_url, "host2")
    _set_host_down(db_url, "host1", forced=True)

    api.evacuate(uuid, host="host2")

    view = api.show(uuid)
    assert (view["status"], view["task_state"]) == ("REBUILD", "rebuilding")
    [migration] = api.list_migrations(instance_uuid=uuid)
    assert (migration["migration_type"], migration["status"], migration["source_compute"]) == (
        "evacuation",
        "accepted",
        "host1",
    )
    assert queued("scheduler") == 1
    assert [a["action"] for a in api.list_actions(uuid)][-1] == "evacuate"


def test_a_new_image_the_host_cannot_run_is_refused_by_the_scheduler_and_given_back(
    db_url: str, booted: list[str]
) -> None:
    """Nova's rebuild check (the image filters on the server's own host): ERROR with the
    fault, the former image back, the allocation untouched."""
    uuid = _boot(booted, "rb5")
    _image(db_url, "s390", properties={"hw_architecture": "s390x"})
    with session_scope(db_url) as session:
        held = consumer_allocations(session, uuid)

    api.rebuild(uuid, "s390")
    view = api.wait(uuid, "ERROR", timeout=30)

    assert "ImagePropertiesFilter removed 1 host (1 -> 0)" in view["fault"]["message"]
    cirros = api.show_image("cirros")["id"]
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert instance.image_ref == cirros
        assert instance.request_spec["image"] == instance.image_ref
        assert consumer_allocations(session, uuid) == held
    [action] = [a for a in api.list_actions(uuid) if a["action"] == "rebuild"]
    assert [(e["event"], e["result"]) for e in action["events"]] == [
        ("conductor_rebuild_server", "Error")
    ]
    assert api.diagnostics(uuid)["power_state"] == 1  # its guest was never touched


class _Request:
    """What Celery hands an errback: the failed step's name and keyword arguments."""

    def __init__(self, task: str, **kwargs: Any) -> None:
        self.task, self.kwargs = task, kwargs


def test_the_errback_undoes_a_rebuild_whose_step_never_ran(db_url: str) -> None:
    uuid = placed_server(db_url, task_state="rebuilding")
    with session_scope(db_url) as session:
        actions.start_action(session, uuid, "rebuild", "req-rb")
    request = _Request("compute.rebuild_instance", instance_uuid=uuid, request_id="req-rb")

    on_rebuild_error(request, RuntimeError("delivery limit"), None)
    on_rebuild_error(request, RuntimeError("delivery limit"), None)  # idempotent

    view = api.show(uuid)
    assert (view["vm_state"], view["task_state"]) == ("error", None)
    assert view["fault"]["message"] == "delivery limit"


def test_the_errback_undoes_an_evacuation_the_scheduler_never_took(
    db_url: str, no_messages: None
) -> None:
    uuid = placed_server(db_url)
    make_compute_node(db_url, "host2")
    _set_host_down(db_url, "host1", forced=True)
    api.evacuate(uuid)
    [migration] = api.list_migrations(instance_uuid=uuid)
    request = _Request(
        "scheduler.select_for_evacuation", instance_uuid=uuid, migration_uuid=migration["uuid"]
    )

    on_rebuild_error(request, RuntimeError("lost"), None)

    view = api.show(uuid)
    assert (view["vm_state"], view["task_state"], view["host"]) == ("error", None, "host1")
    assert api.list_migrations(instance_uuid=uuid)[0]["status"] == "error"
    assert api.list_actions(uuid)[-1]["events"][0]["result"] == "Error"


@pytest.mark.parametrize(
    ("call", "kwargs", "field"),
    [
        ("rebuild", {"image": 7}, "image"),
        ("rebuild", {"image": ["cirros"]}, "image"),
        ("rebuild", {"image": "c\x00"}, "image"),
        ("rebuild", {"image": "x" * 256}, "image"),
        ("evacuate", {"host": "host\x00"}, "host"),
        ("evacuate", {"host": ["host2"]}, "host"),
        ("evacuate", {"host": 2}, "host"),
    ],
)
def test_malformed_arguments_are_refused_naming_the_field(
    db_url: str, no_messages: None, call: str, kwargs: dict[str, Any], field: str
) -> None:
    uuid = placed_server(db_url)
    _set_host_down(db_url, "host1", forced=True)
    before = _nothing_written(db_url)
    with pytest.raises(InvalidInput) as raised:
        getattr(api, call)(uuid, **kwargs)
    assert field in str(raised.value)
    assert _nothing_written(db_url) == before


def test_the_cli_needs_an_image_to_rebuild(db_url: str) -> None:
    result = CliRunner().invoke(main, ["rebuild", "vm"])
    assert result.exit_code == 2 and "--image" in result.output


def test_rebuild_sends_novas_versioned_notifications(db_url: str, booted: list[str]) -> None:
    uuid = _boot(booted, "rb6")
    _image(db_url, "fedora")
    sent: list[str] = []
    notifications.install(lambda message, priority: sent.append(message["event_type"]))
    try:
        api.rebuild(uuid, "fedora")
        api.wait(uuid, "ACTIVE", timeout=30)
    finally:
        notifications.install(None)
    assert [e for e in sent if e.startswith("instance.rebuild")] == [
        "instance.rebuild_scheduled",
        "instance.rebuild.start",
        "instance.rebuild.end",
    ]


def test_a_host_down_by_its_heartbeats_alone_may_be_evacuated_from_the_cli(
    db_url: str, no_messages: None
) -> None:
    """Nova's rule is the service group's: down (no heartbeat within service_down_time)
    or forced down."""
    uuid = placed_server(db_url, display_name="lonely")
    make_compute_node(db_url, "host2")
    _set_host_down(db_url, "host1")

    result = CliRunner().invoke(main, ["evacuate", "lonely"])

    assert result.exit_code == 0, result.output
    assert "Request to evacuate server lonely has been accepted" in result.output
    assert api.show(uuid)["task_state"] == "rebuilding"
    assert queued("scheduler") == 1
