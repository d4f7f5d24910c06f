"""The threshold passes (``compute.periodic.timeouts``, ``resize_confirm``, ``deferred``)
on servers booted through the API and a real in-thread worker (libvirt test:///): the
pass is called as the periodic task calls it, with its threshold shrunk, after the
server's timestamp is moved that far back; what it asks of the API then runs through the
worker."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from typing import Any

import pytest
from sqlalchemy import update

from compute.claims import consumer_allocations
from compute.instance_state import cas_update, get_instance
from compute.periodic import deferred, resize_confirm, timeouts
from models import Migration, utcnow
from models.db import session_scope
from novaq.exceptions import FlavorExists
from novaq.settings import get_settings
from tasks import context
from tasks.periodic import run_pass
from tests.factories import make_compute_node, make_instance, make_migration
from tests.unit.workflows.servers import boot_active, delete_and_wait, periodic_context
from workflows import api

THRESHOLD = 60  # seconds
LONG_AGO = dt.timedelta(seconds=600)


def _held(db_url: str, consumer: str) -> dict[str, int]:
    with session_scope(db_url) as session:
        return consumer_allocations(session, consumer)


def _events(uuid: str, action: str) -> list[tuple[str, str]]:
    [*_, last] = [a for a in api.list_actions(uuid) if a["action"] == action]
    return [(e["event"], e["result"]) for e in last["events"]]


def _migration(uuid: str, status: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (migration := api.list_migrations(instance_uuid=uuid)[-1])["status"] != status:
        assert time.monotonic() < deadline, migration
        time.sleep(0.1)
    return migration


def test_an_unconfirmed_resize_past_resize_confirm_window_is_confirmed(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    same_host = get_settings().model_copy(update={"allow_resize_to_same_host": True})
    monkeypatch.setattr(context, "settings", lambda: same_host)
    uuid = boot_active()
    with contextlib.suppress(FlavorExists):
        api.create_flavor("m2", 2, 1024, 1)
    api.resize(uuid, "m2")
    api.wait(uuid, "VERIFY_RESIZE", timeout=30)
    migration = _migration(uuid, "finished")
    assert migration["dest_compute"] == "host1"
    assert _held(db_url, migration["uuid"]) != {}  # the migration holds the source
    ctx = periodic_context(db_url, resize_confirm_window=THRESHOLD)

    assert (
        run_pass(resize_confirm.poll_unconfirmed_resizes, ctx)["confirming"] == []
    )  # not yet past
    assert api.show(uuid)["status"] == "VERIFY_RESIZE"

    with session_scope(db_url) as session:
        session.execute(
            update(Migration)
            .where(Migration.uuid == migration["uuid"])
            .values(updated_at=utcnow() - LONG_AGO)
        )
    summary = run_pass(resize_confirm.poll_unconfirmed_resizes, ctx)
    assert summary == {
        "confirming": [migration["uuid"]],
        "skipped": [],
        "errored": [],
        "failed": [],
    }
    _migration(uuid, "confirmed")
    view = api.wait(uuid, "ACTIVE", timeout=30)
    assert (view["host"], view["flavor"]["name"]) == ("host1", "m2")
    assert _held(db_url, migration["uuid"]) == {}  # the source allocation is gone
    assert _held(db_url, uuid) != {}
    assert _events(uuid, "confirmResize") == [("compute_confirm_resize", "Success")]
    delete_and_wait(uuid)


def test_a_server_rescued_past_rescue_timeout_is_unrescued_through_the_api(
    db_url: str, worker: None
) -> None:
    uuid = boot_active()
    api.rescue(uuid)
    api.wait(uuid, "RESCUE", timeout=30)
    ctx = periodic_context(db_url, rescue_timeout=THRESHOLD)

    assert run_pass(timeouts.poll_rescued_instances, ctx)["unrescued"] == []  # rescued just now
    assert api.show(uuid)["status"] == "RESCUE"

    with session_scope(db_url) as session:
        cas_update(session, uuid, launched_at=utcnow() - LONG_AGO)
    assert run_pass(timeouts.poll_rescued_instances, ctx) == {"unrescued": [uuid], "failed": []}
    view = api.wait(uuid, "ACTIVE", timeout=30)
    assert view["fault"] is None
    assert api.diagnostics(uuid)["power_state"] == 1
    assert _events(uuid, "unrescue") == [("compute_unrescue_instance", "Success")]
    delete_and_wait(uuid)


def test_a_server_shelved_past_shelved_offload_time_is_offloaded(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    keep = get_settings().model_copy(update={"shelved_offload_time": -1})
    monkeypatch.setattr(context, "settings", lambda: keep)
    uuid = boot_active()
    api.shelve(uuid)
    api.wait(uuid, "SHELVED", timeout=30)
    assert _held(db_url, uuid) != {}
    ctx = periodic_context(db_url, shelved_offload_time=THRESHOLD)

    assert deferred.poll_shelved_instances(ctx)["offloaded"] == []  # shelved just now

    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        shelved_at = dt.datetime.fromisoformat(instance.system_metadata["shelved_at"])
        meta = {**instance.system_metadata, "shelved_at": (shelved_at - LONG_AGO).isoformat()}
        instance.system_metadata = meta
    assert deferred.poll_shelved_instances(ctx) == {"offloaded": [uuid], "failed": []}
    view = api.show(uuid)
    assert (view["status"], view["task_state"], view["host"]) == ("SHELVED_OFFLOADED", None, None)
    assert _held(db_url, uuid) == {}
    assert not context.driver().instance_exists(uuid)
    delete_and_wait(uuid)


def test_a_request_the_api_refuses_is_logged_and_left_for_the_next_run(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    old = utcnow() - LONG_AGO
    locked = {"locked": True}
    rescued = make_instance(
        db_url,
        host="host1",
        vm_state="rescued",
        task_state=None,
        launched_at=old,
        system_metadata=locked,
    )
    busy = make_instance(
        db_url, host="host1", vm_state="rescued", task_state="unrescuing", launched_at=old
    )
    resized = make_instance(
        db_url,
        host="host1",
        vm_state="resized",
        task_state=None,
        launched_at=old,
        system_metadata=locked,
    )
    make_migration(
        db_url,
        resized,
        status="finished",
        source_compute="host1",
        source_node=None,
        dest_compute="host1",
        dest_node=None,
        updated_at=old,
    )
    ctx = periodic_context(db_url, rescue_timeout=THRESHOLD, resize_confirm_window=THRESHOLD)
    assert run_pass(timeouts.poll_rescued_instances, ctx) == {"unrescued": [], "failed": [rescued]}
    [migration] = run_pass(resize_confirm.poll_unconfirmed_resizes, ctx)["failed"]
    assert api.list_migrations(instance_uuid=resized)[0]["status"] == "finished"
    assert api.list_migrations(instance_uuid=resized)[0]["uuid"] == migration
    for uuid, status in ((rescued, "RESCUE"), (busy, "RESCUE"), (resized, "VERIFY_RESIZE")):
        assert api.show(uuid)["status"] == status
        assert [a["action"] for a in api.list_actions(uuid)] == ["create"]


def test_a_stuck_reboot_of_a_booted_server_is_finished(db_url: str, worker: None) -> None:
    uuid = boot_active()
    # A soft reboot whose step was lost: the API set the task, nothing ran it.
    with session_scope(db_url) as session:
        cas_update(
            session,
            uuid,
            expected_task_state=[None],
            task_state="rebooting",
            updated_at=utcnow() - LONG_AGO,
        )
    assert api.show(uuid)["status"] == "REBOOT"
    result = timeouts.poll_rebooting_instances(periodic_context(db_url, reboot_timeout=THRESHOLD))
    assert result == {"finished": [uuid], "rebooted_hard": [], "failed": []}
    view = api.show(uuid)
    assert (view["status"], view["task_state"]) == ("ACTIVE", None)
    delete_and_wait(uuid)


def test_a_server_soft_deleted_past_reclaim_instance_interval_is_reclaimed(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workflows.api import common as api_common

    soft = get_settings().model_copy(update={"reclaim_instance_interval": 3600})
    monkeypatch.setattr(api_common, "settings", lambda: soft)
    uuid = boot_active()
    api.delete(uuid)
    api.wait(uuid, "SOFT_DELETED", timeout=30)
    ctx = periodic_context(db_url, reclaim_instance_interval=THRESHOLD)

    assert deferred.reclaim_queued_deletes(ctx) == {"reclaimed": []}  # deleted just now

    with session_scope(db_url) as session:
        cas_update(session, uuid, deleted_at=utcnow() - LONG_AGO)
    assert deferred.reclaim_queued_deletes(ctx) == {"reclaimed": [uuid]}
    assert api.show(uuid)["status"] == "DELETED"
    assert _held(db_url, uuid) == {}
    assert not context.driver().instance_exists(uuid)
