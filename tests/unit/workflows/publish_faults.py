"""What the publish-failure tests share (issue 14, item 4): the whole database as rows,
the servers each write-then-publish call is aimed at, and a broker that stops answering
while a call waits at its publish point."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from models.base import Base
from models.db import session_scope
from novaq import fault_points
from novaq.celery_app import app
from tests.factories import add_migration, flavor_dict
from tests.unit.workflows.servers import placed_server
from workflows import api

#: The server the calls are aimed at: flavor root_gb 4, ephemeral 2 (so "bigger" grows).
CURRENT = flavor_dict(2, 1024, 4, ephemeral_gb=2)
#: A port nothing listens on: a broker that is down.
CLOSED_BROKER = "redis://127.0.0.1:1/0"


def database(db_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in primary-key order: "exactly as before" means this."""
    with session_scope(db_url) as session:
        return {
            table.name: [
                tuple(row)
                for row in session.execute(select(table).order_by(*table.primary_key.columns))
            ]
            for table in Base.metadata.sorted_tables
        }


@dataclass(frozen=True)
class Case:
    """One write-then-publish call: the server it needs (``vm_state`` and column
    overrides of ``placed_server``; None: no server), the call, and the first task of
    the workflow it publishes (the fault point ``publish:<task>``)."""

    id: str
    call: Callable[[str], Any]
    first_task: str
    vm_state: str | None = "active"
    overrides: tuple[tuple[str, Any], ...] = ()
    migration: str | None = None  # the status of a resize waiting on the server
    #: Nova's reclaim_instance_interval is set: a delete is a soft delete.
    soft: bool = False


def _boot(_: str) -> Any:
    return api.boot("vm", "m1", "cirros")


def _boot_with_metadata(_: str) -> Any:
    return api.boot(
        "vm", "m1", "cirros", min_count=2, max_count=3, metadata={"a": "1"}, description="d"
    )


def _boot_two_in_a_group(_: str) -> Any:
    [group] = api.list_server_groups()
    return api.boot("vm", "m1", "cirros", count=2, group=group["id"])


CASES = [
    Case("boot", _boot, "scheduler.select_destinations", vm_state=None),
    Case("boot-two-in-group", _boot_two_in_a_group, "scheduler.select_destinations", None),
    Case("boot-with-metadata", _boot_with_metadata, "scheduler.select_destinations", None),
    Case("delete", api.delete, "compute.terminate_instance"),
    Case("soft-delete", api.delete, "compute.soft_delete_instance", soft=True),
    Case(
        "delete-while-rebooting",
        api.delete,
        "compute.terminate_instance",
        overrides=(("task_state", "rebooting"),),
    ),
    Case("stop", api.stop, "compute.stop_instance"),
    Case("force-stop", api.force_stop, "compute.stop_instance", "paused"),
    Case("start", api.start, "compute.start_instance", "stopped"),
    Case("reboot", api.reboot, "compute.reboot_instance"),
    Case(
        "reboot-hard-over-soft",
        lambda uuid: api.reboot(uuid, hard=True),
        "compute.reboot_instance",
        overrides=(("task_state", "rebooting"),),
    ),
    Case("pause", api.pause, "compute.pause_instance"),
    Case("unpause", api.unpause, "compute.unpause_instance", "paused"),
    Case("suspend", api.suspend, "compute.suspend_instance"),
    Case("resume", api.resume, "compute.resume_instance", "suspended"),
    Case("rescue", api.rescue, "compute.rescue_instance"),
    Case("unrescue", api.unrescue, "compute.unrescue_instance", "rescued"),
    Case("trigger-crash-dump", api.trigger_crash_dump, "compute.trigger_crash_dump"),
    Case("shelve", api.shelve, "compute.shelve_instance"),
    Case("shelve-offload", api.shelve_offload, "compute.shelve_offload_instance", "shelved"),
    Case("unshelve", api.unshelve, "scheduler.select_for_unshelve", "shelved"),
    Case(
        "unshelve-offloaded",
        api.unshelve,
        "scheduler.select_for_unshelve",
        "shelved_offloaded",
        (("host", None), ("node", None)),
    ),
    Case(
        "restore",
        api.restore,
        "compute.restore_instance",
        "soft-delete",
        (("deleted_at", "now"),),
    ),
    Case("resize", lambda uuid: api.resize(uuid, "bigger"), "scheduler.select_for_move"),
    Case("migrate", api.migrate, "scheduler.select_for_move", "stopped"),
    Case(
        "confirm-resize",
        api.confirm_resize,
        "compute.confirm_resize",
        "resized",
        migration="finished",
    ),
    Case(
        "revert-resize",
        api.revert_resize,
        "compute.revert_resize",
        "resized",
        migration="finished",
    ),
]


def make_server(db_url: str, case: Case) -> str:
    """The world of ``case``: flavors m1 and bigger, a server group, and the server."""
    api.create_flavor("m1", 1, 512, 1)
    api.create_flavor("bigger", 4, 2048, 4, ephemeral_gb=2)
    api.create_server_group("g", "affinity")
    if case.vm_state is None:
        return ""
    from models import utcnow

    overrides = {k: (utcnow() if v == "now" else v) for k, v in case.overrides}
    uuid = placed_server(db_url, case.vm_state, flavor=CURRENT, **overrides)
    if case.migration is not None:
        with session_scope(db_url) as session:
            add_migration(
                session,
                uuid,
                status=case.migration,
                dest_compute="host1",
                old_flavor=CURRENT,
                new_flavor=flavor_dict(4, 2048, 4, ephemeral_gb=2),
                request_id="req-resize",
            )
    return uuid


@contextlib.contextmanager
def broker_at(url: str) -> Iterator[None]:
    """The API's broker is ``url`` for a while: its connection pool is rebuilt, so the
    next publish really connects there."""
    saved = {key: app.conf[key] for key in ("broker_url", "broker_write_url")}
    _drop_pools()
    app.conf.update(broker_url=url, broker_write_url=url)
    try:
        yield
    finally:
        _drop_pools()
        app.conf.update(saved)


def _drop_pools() -> None:
    # NOTE: dropped, not closed: kombu keeps one pool per broker URL, and the in-memory
    # broker's comes back (still open) when its URL does.
    app._pool = None
    app.amqp._producer_pool = None


def call_with_broker_down_at_publish(
    faults: Path, point: str, call: Callable[[], Any], while_paused: Callable[[], None]
) -> tuple[Any, BaseException | None]:
    """Run ``call`` in a thread until it waits at the publish point ``point`` (its write
    committed), run ``while_paused``, then let it publish to a broker that is down.
    Returns what the call returned or raised."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    fault_points.arm_pause(faults, point)
    thread = threading.Thread(target=run)
    thread.start()
    try:
        fault_points.wait_reached(faults, point, timeout_s=30)
        while_paused()
        with broker_at(CLOSED_BROKER):
            fault_points.release(faults, point)
            thread.join(timeout=60)
    finally:
        fault_points.release(faults, point)
        thread.join(timeout=60)
    if thread.is_alive():
        pytest.fail("the API call did not come back from its publish")
    return outcome.get("value"), outcome.get("error")


#: The tables a request writes (the worker's own rows, services and nodes, aside).
REQUEST_TABLES = (
    "instances",
    "instance_actions",
    "instance_actions_events",
    "instance_faults",
    "migrations",
    "allocations",
    "instance_group_member",
)


def request_rows(db_url: str) -> dict[str, list[tuple[Any, ...]]]:
    rows = database(db_url)
    missing = set(REQUEST_TABLES) - set(rows)
    assert not missing, f"no such tables: {missing}"
    return {name: rows[name] for name in REQUEST_TABLES}


def late_copy(db_url: str, case_id: str, uuid: str) -> Any:
    """The workflow the call is about to publish (read while it waits at its publish
    point): the copy that reached the broker although the publish reported a failure."""
    from models import Instance, InstanceAction, Migration
    from scheduler.request_spec import RequestSpec
    from workflows.build import build_workflow
    from workflows.lifecycle import lifecycle_step
    from workflows.moves import confirm_workflow, revert_workflow, select_workflow
    from workflows.shelve import unshelve_workflow

    with session_scope(db_url) as session:
        if case_id == "boot":
            instance = session.scalars(select(Instance)).one()
            uuid = instance.uuid
            spec = RequestSpec.from_dict(dict(instance.request_spec))
        request_id = session.scalars(
            select(InstanceAction.request_id)
            .where(InstanceAction.instance_uuid == uuid)
            .order_by(InstanceAction.id.desc())
        ).first()
        assert request_id is not None
        migration = session.scalars(
            select(Migration).where(Migration.instance_uuid == uuid).order_by(Migration.id.desc())
        ).first()
        migration_uuid = migration.uuid if migration is not None else ""
    copies: dict[str, Callable[[], Any]] = {
        "boot": lambda: build_workflow(request_id, [spec]),
        "stop": lambda: lifecycle_step("stop", uuid, request_id, "host1"),
        "trigger-crash-dump": lambda: lifecycle_step(
            "trigger_crash_dump", uuid, request_id, "host1"
        ),
        "unshelve-offloaded": lambda: unshelve_workflow(uuid, request_id),
        "resize": lambda: select_workflow(migration_uuid, uuid, request_id),
        "confirm-resize": lambda: confirm_workflow(migration_uuid, uuid, request_id, "host1"),
        "revert-resize": lambda: revert_workflow(
            migration_uuid, uuid, request_id, "host1", "host1"
        ),
    }
    return copies[case_id]()
