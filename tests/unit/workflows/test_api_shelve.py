"""The shelve family and soft delete / restore through the API: refusals before anything
is written or enqueued, and every sequence through a real in-thread worker on libvirt
test:/// (guest state via api.diagnostics, allocations via api.list_hosts)."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest

from compute.claims import consumer_allocations
from compute.instance_state import cas_update
from compute.sessions import sessions_for
from compute.soft_delete import reclaim_queued_deletes
from models import utcnow
from models.db import session_scope
from novaq.exceptions import FlavorExists, InstanceInvalidState
from novaq.settings import get_settings
from tasks import context
from tests.factories import make_instance
from tests.unit.workflows.servers import action_count, clear_queues, placed_server, queued
from workflows import api
from workflows.api import common as api_common

QUEUES = ("compute.host1", "scheduler")


@pytest.fixture
def empty_queues() -> Iterator[None]:
    yield
    clear_queues(*QUEUES)


def _allocations(db_url: str, uuid: str) -> dict[str, int]:
    with session_scope(db_url) as session:
        return consumer_allocations(session, uuid)


def _memory_used() -> int:
    [host] = [h for h in api.list_hosts() if h["host"] == "host1"]
    return int(host["memory_mb_used"])


# -- refusals -----------------------------------------------------------------------------

REFUSED = [
    (api.shelve, "shelved"),
    (api.shelve, "shelved_offloaded"),
    (api.shelve, "rescued"),
    (api.shelve_offload, "active"),
    (api.shelve_offload, "shelved_offloaded"),
    (api.unshelve, "active"),
    (api.unshelve, "stopped"),
    (api.restore, "active"),
    (api.restore, "shelved"),
    (api.resize, "shelved"),
    (api.resize, "shelved_offloaded"),
    (api.start, "shelved"),
    (api.stop, "soft-delete"),
]


@pytest.mark.parametrize(("call", "vm_state"), REFUSED)
def test_a_shelve_family_call_in_a_state_nova_forbids_is_refused(
    db_url: str, call: Any, vm_state: str
) -> None:
    uuid = placed_server(db_url, vm_state)
    before = (queued(*QUEUES), action_count(db_url))
    with pytest.raises(InstanceInvalidState, match=f"vm_state {vm_state}"):
        if call is api.resize:
            api.create_flavor("m2", 2, 1024, 1)
            call(uuid, "m2")
        else:
            call(uuid)
    assert (queued(*QUEUES), action_count(db_url)) == before
    assert api.show(uuid)["task_state"] is None


def test_a_shelve_while_another_task_is_in_flight_is_refused(db_url: str) -> None:
    uuid = placed_server(db_url, "active", task_state="pausing")
    with pytest.raises(InstanceInvalidState, match="task_state pausing"):
        api.shelve(uuid)
    offloaded = placed_server(
        db_url, "shelved_offloaded", host=None, node=None, task_state="unshelving"
    )
    with pytest.raises(InstanceInvalidState, match="task_state unshelving"):
        api.unshelve(offloaded)


def test_an_accepted_shelve_sets_the_task_and_enqueues_one_step(
    db_url: str, empty_queues: None
) -> None:
    uuid = placed_server(db_url, "paused")
    before = queued(*QUEUES)
    request_id = api.shelve(uuid)
    view = api.show(uuid)
    assert (view["vm_state"], view["task_state"]) == ("paused", "shelving")
    assert api.list_actions(uuid)[-1]["action"] == "shelve"
    assert api.list_actions(uuid)[-1]["request_id"] == request_id
    assert queued(*QUEUES) == before + 1
    offloaded = placed_server(db_url, "shelved_offloaded", host=None, node=None)
    api.unshelve(offloaded)  # no host needed: it is scheduled again
    assert api.show(offloaded)["task_state"] == "unshelving"
    assert api.list_actions(offloaded)[-1]["action"] == "unshelve"
    assert queued(*QUEUES) == before + 2


# -- through a worker -------------------------------------------------------------------


def _settled(uuid: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (view := api.show(uuid))["task_state"] is not None:
        assert time.monotonic() < deadline, view
        time.sleep(0.1)
    return view


def _boot(db_url: str) -> str:
    with contextlib.suppress(FlavorExists):
        api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("vm", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    return uuid


def _delete(uuid: str) -> None:
    """Leave no guest behind: the next test's instance-00000001 must be free."""
    _settled(uuid)
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


def _events(uuid: str, action: str) -> list[tuple[str, str]]:
    [*_, last] = [a for a in api.list_actions(uuid) if a["action"] == action]
    return [(e["event"], e["result"]) for e in last["events"]]


def test_shelve_offloads_at_once_and_unshelve_schedules_and_spawns_again(
    db_url: str, worker: None
) -> None:
    uuid = _boot(db_url)
    busy = _memory_used()
    held = _allocations(db_url, uuid)
    api.shelve(uuid)
    view = api.wait(uuid, "SHELVED_OFFLOADED", timeout=30)
    assert (view["vm_state"], view["task_state"], view["host"]) == ("shelved_offloaded", None, None)
    assert not context.driver().instance_exists(uuid)  # guest destroyed and undefined
    with pytest.raises(InstanceInvalidState):
        api.diagnostics(uuid)  # no host to ask
    assert _allocations(db_url, uuid) == {}
    assert _memory_used() == busy - 512
    assert _events(uuid, "shelve") == [("compute_shelve_instance", "Success")]
    assert view["fault"] is None
    api.unshelve(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=30)
    assert (view["host"], view["task_state"]) == ("host1", None)
    assert api.diagnostics(uuid)["power_state"] == 1
    assert _allocations(db_url, uuid) == held and _memory_used() == busy
    assert _events(uuid, "unshelve") == [
        ("schedule_instances", "Success"),
        ("compute_unshelve_instance", "Success"),
    ]
    _delete(uuid)
    assert _memory_used() == busy - 512


def test_shelve_without_offload_keeps_the_claim_then_unshelve_starts_it_in_place(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    keep = get_settings().model_copy(update={"shelved_offload_time": -1})
    monkeypatch.setattr(context, "settings", lambda: keep)
    uuid = _boot(db_url)
    held = _allocations(db_url, uuid)
    api.pause(uuid)
    api.wait(uuid, "PAUSED", timeout=30)
    api.shelve(uuid)
    view = api.wait(uuid, "SHELVED", timeout=30)
    assert view["host"] == "host1" and view["power_state"] == 4
    assert api.diagnostics(uuid)["power_state"] == 4  # defined, off
    assert _allocations(db_url, uuid) == held  # a shelved server still consumes
    api.unshelve(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=30)
    assert api.diagnostics(uuid)["power_state"] == 1
    assert _events(uuid, "unshelve") == [("compute_start_instance", "Success")]
    api.shelve(uuid)
    api.wait(uuid, "SHELVED", timeout=30)
    with pytest.raises(InstanceInvalidState):
        api.resize(uuid, "m1")
    api.shelve_offload(uuid)
    view = api.wait(uuid, "SHELVED_OFFLOADED", timeout=30)
    assert view["host"] is None and not context.driver().instance_exists(uuid)
    assert _allocations(db_url, uuid) == {}
    assert _events(uuid, "shelveOffload") == [("compute_shelve_offload_instance", "Success")]
    api.delete(uuid)  # no host: a local delete
    api.wait(uuid, "DELETED", timeout=30)


def test_unshelve_with_no_valid_host_stays_offloaded_with_a_fault(
    db_url: str, worker: None
) -> None:
    from tests.factories import flavor_dict

    _boot_worker_node = _boot(db_url)  # the worker's node exists once something ran
    _delete(_boot_worker_node)
    huge = flavor_dict(1000, 512, 1)
    uuid = make_instance(
        db_url, huge, vm_state="shelved_offloaded", task_state=None, launched_at=utcnow()
    )
    api.unshelve(uuid)
    view = _settled(uuid)
    assert (view["vm_state"], view["host"]) == ("shelved_offloaded", None)
    assert "No valid host" in view["fault"]["message"]
    assert _events(uuid, "unshelve")[0][0] == "schedule_instances"
    assert _events(uuid, "unshelve")[0][1] == "Error"
    assert _allocations(db_url, uuid) == {}


def test_soft_delete_keeps_the_claim_restore_brings_it_back_and_reclaim_deletes(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    soft = get_settings().model_copy(update={"reclaim_instance_interval": 3600})
    monkeypatch.setattr(api_common, "settings", lambda: soft)
    uuid = _boot(db_url)
    busy = _memory_used()
    request_id = api.delete(uuid)
    view = api.wait(uuid, "SOFT_DELETED", timeout=30)
    assert view["deleted_at"] is not None and view["host"] == "host1"
    assert api.diagnostics(uuid)["power_state"] == 4  # powered off, not destroyed
    assert _memory_used() == busy  # a soft-deleted server still consumes
    # Deleting a soft-deleted server deletes it for good (Nova's force delete).
    assert api.delete(uuid) != request_id
    api.wait(uuid, "DELETED", timeout=30)
    assert _memory_used() == busy - 512 and not context.driver().instance_exists(uuid)

    uuid = _boot(db_url)
    api.delete(uuid)
    api.wait(uuid, "SOFT_DELETED", timeout=30)
    assert _events(uuid, "delete") == [("compute_soft_delete_instance", "Success")]
    api.restore(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=30)
    assert view["deleted_at"] is None and api.diagnostics(uuid)["power_state"] == 1
    assert _events(uuid, "restore") == [("compute_restore_instance", "Success")]

    api.delete(uuid)
    api.wait(uuid, "SOFT_DELETED", timeout=30)
    with session_scope(db_url) as session:
        cas_update(session, uuid, deleted_at=utcnow() - dt.timedelta(seconds=60))
    tiny = get_settings().model_copy(update={"reclaim_instance_interval": 1})
    assert reclaim_queued_deletes(sessions_for(db_url), context.driver(), "host1", tiny) == [uuid]
    assert api.show(uuid)["status"] == "DELETED"
    assert not context.driver().instance_exists(uuid)
    assert _memory_used() == busy - 512
