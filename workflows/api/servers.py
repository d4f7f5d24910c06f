"""The public API for servers: flavors, boot (``boot.py``), update (``server_update.py``),
delete, and what a server looks like."""

from __future__ import annotations

import time
from typing import Annotated, Any, cast

from celery.canvas import Signature
from sqlalchemy import Row, bindparam, select
from sqlalchemy.orm import Session
from typing_extensions import TypedDict, Unpack

from compute import instance_actions as actions
from compute.delete import local_delete
from compute.instance_state import get_instance, update_columns
from compute.servicegroup import COMPUTE, is_up
from compute.states import TaskState, VmState
from models import Instance, InstanceAction, Service, ServiceLiveness, utcnow
from models.db import session_scope
from models.tables import table_of
from novaq.exceptions import (
    InstanceErrored,
    InstanceInvalidState,
    InstanceNotFound,
    WaitTimeout,
)
from workflows import dispatch
from workflows.api import common, flavors, server_query, submit, views, waiting
from workflows.api.boot import boot
from workflows.api.server_update import update
from workflows.api.submit import Written
from workflows.api.validation import Int, Name, Printable, Seconds, expect, validated
from workflows.canvas import step
from workflows.delete import delete_workflow, soft_delete_step

#: An extra spec's value: a string (a number is taken as its string).
SpecValue = Annotated[str | int | float, expect("a string")]


class InstanceFilters(TypedDict, total=False):
    host: Printable | None
    name: str
    vm_state: str
    status: str
    flavor: Name
    deleted: bool
    locked: bool
    limit: Int | None
    marker: Name | None


# -- flavors -------------------------------------------------------------------------------


@validated(labels={"name": "flavor name"}, items={"extra_specs": "extra spec"})
def create_flavor(
    name: Name,
    vcpus: Int,
    memory_mb: Int,
    root_gb: Int,
    ephemeral_gb: Int = 0,
    swap: Int = 0,
    extra_specs: dict[Name, SpecValue] | None = None,
    is_public: bool = True,
) -> dict[str, Any]:
    """A flavor; ``is_public=False`` makes it private (see ``add_flavor_access``)."""
    with session_scope(common.db_url()) as session:
        flavor = flavors.create_flavor(
            session,
            name,
            vcpus,
            memory_mb,
            root_gb,
            ephemeral_gb,
            swap,
            extra_specs,
            settings=common.settings(),
            is_public=is_public,
        )
        return flavors.flavor_dict(flavor)


@validated()
def list_flavors(is_public: bool | None = True) -> list[dict[str, Any]]:
    """Flavors as Nova lists them to an operator: the public ones by default;
    ``is_public=None`` every one, ``False`` the private ones only."""
    with session_scope(common.db_url(), read_only=True) as session:
        return [flavors.flavor_dict(f) for f in flavors.list_flavors(session, is_public)]


# -- build and delete ----------------------------------------------------------------------


@validated()
def delete(uuid: str) -> str:
    """Delete a server (any state). Returns the action's request id.

    A delete to a host that is up is one write transaction (issue 16): the instance is
    read, checked and written there, its action and its operation's record with it; a
    repeated delete, a local delete and a soft delete leave it with nothing written."""
    uuid = common.check_uuid(uuid)
    s = common.settings()
    request_id = common.new_request_id()
    with session_scope(common.db_url()) as session:
        # (on the connection: a Core row, nothing pending; no ORM execution layer)
        instance = session.connection().execute(_DELETE_VIEW, {"uuid": uuid}).first()
        if instance is None:
            raise InstanceNotFound(uuid=uuid)
        if instance.task_state in (TaskState.DELETING, TaskState.SOFT_DELETING):
            # Nova ignores a repeated delete while one is in progress.
            previous = common.last_action(session, uuid, "delete")
            if previous is not None:
                return previous.request_id
        host = instance.host
        # (the host's service came with the row, which has the columns ``is_up`` reads of a
        # Service: one statement less per delete)
        host_up = instance.service_id is not None and is_up(cast(Service, instance), s)
        # Nova's REST layer soft-deletes when reclaim_instance_interval is set and the
        # server has run; a soft-deleted server is then deleted for good (force delete).
        soft = (
            s.reclaim_instance_interval > 0
            and instance.launched_at is not None
            and instance.vm_state not in (VmState.SOFT_DELETED, VmState.RESIZED)
        )
        if host_up and not soft:
            assert host is not None
            dispatch.check_broker()
            workflow, written, recorded = _ask_terminate(session, instance, request_id, host)
    if not host_up:
        # Nova's local delete: no host, or a host that is down.
        with session_scope(common.db_url()) as session:
            actions.start_action(session, uuid, "delete", request_id)
        local_delete(common.sessions(), uuid, request_id)
        return request_id
    assert host is not None
    if soft:
        dispatch.check_broker()
        return _soft_delete(uuid, request_id, host)
    submit.publish(workflow, written, recorded)
    return request_id


_INSTANCES, _SERVICES = table_of(Instance), table_of(Service)
_LIVENESS = table_of(ServiceLiveness)
#: What ``delete`` reads of a live instance: its columns, no ``Instance`` loaded (the ORM's
#: load of the whole row cost the delete about 0.4 ms), and what ``is_up`` reads of its
#: host's compute service (``service_id`` None: no host, or no such service), which
#: ``common.host_is_up`` read in a statement of its own (at most one row: a service is
#: unique by host, binary and ``deleted``).
_DELETE_VIEW = (
    select(
        *(
            _INSTANCES.c[name]
            for name in (
                "id",
                "uuid",
                "task_state",
                "vm_state",
                "host",
                "launched_at",
                "updated_at",
            )
        ),
        _SERVICES.c.id.label("service_id"),
        _SERVICES.c.forced_down,
        _LIVENESS.c.last_seen_up,
        _SERVICES.c.created_at,
    )
    .outerjoin(
        _SERVICES,
        (_SERVICES.c.host == _INSTANCES.c.host)
        & (_SERVICES.c.binary == COMPUTE)
        & (_SERVICES.c.deleted == 0),
    )
    .outerjoin(_LIVENESS, _LIVENESS.c.service_id == _SERVICES.c.id)
    .where(_INSTANCES.c.uuid == bindparam("uuid"), _INSTANCES.c.deleted == 0)
)


def _ask_terminate(
    session: Session, instance: Row[Any], request_id: str, host: str
) -> tuple[Signature, Written, dispatch.Recorded]:
    """Task ``deleting``, the action and the operation's record, in the caller's
    transaction (they commit together)."""
    uuid = instance.uuid
    written = Written(
        request_id, (uuid,), TaskState.DELETING, submit.columns(instance, "task_state")
    )
    actions.start_action(session, uuid, "delete", request_id)
    # Core statements, not the ORM's flush (about 1 ms each): the action, then the row.
    update_columns(session, instance.id, {"task_state": TaskState.DELETING, "updated_at": utcnow()})
    workflow = delete_workflow(uuid, request_id, host)
    recorded = dispatch.record(session, workflow, {uuid: TaskState.DELETING})
    return workflow, written, recorded


def _soft_delete(uuid: str, request_id: str, host: str) -> str:
    """Nova's ``soft_delete``: task ``soft-deleting`` and ``deleted_at`` (no
    compare-and-swap, as Nova's ``_delete``), action "delete", then the host step."""
    with session_scope(common.db_url()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        written = Written(
            request_id,
            (uuid,),
            TaskState.SOFT_DELETING,
            submit.columns(instance, "task_state", "deleted_at"),
        )
        now = utcnow()
        instance.task_state, instance.deleted_at, instance.updated_at = (
            TaskState.SOFT_DELETING,
            now,
            now,
        )
        actions.start_action(session, uuid, "delete", request_id)
    submit.publish(soft_delete_step("soft_delete", uuid, request_id, host), written)
    return request_id


# -- queries -------------------------------------------------------------------------------


@validated()
def show(uuid: str) -> dict[str, Any]:
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url(), read_only=True) as session:
        return views.instance_dict(session, get_instance(session, uuid))


@validated(extra="filter")
def list_instances(**filters: Unpack[InstanceFilters]) -> list[dict[str, Any]]:
    """Servers, oldest first. Filters (``server_query``): host, name (a regular
    expression), vm_state, status, flavor, deleted (True: only deleted servers), locked; then
    ``marker`` (the uuid of the last server of the previous page) and ``limit``."""
    with session_scope(common.db_url(), read_only=True) as session:
        return server_query.run(session, server_query.build(session, dict(filters)))


@validated()
def list_actions(uuid: str) -> list[dict[str, Any]]:
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url(), read_only=True) as session:
        get_instance(session, uuid)
        rows = session.scalars(
            select(InstanceAction)
            .where(InstanceAction.instance_uuid == uuid)
            .order_by(InstanceAction.id)
        )
        return [views.action_dict(a) for a in rows]


@validated()
def wait(
    uuid: str,
    status: str,
    timeout: Seconds = 120.0,
    interval: Seconds = 0.2,
    request_id: Name | None = None,
) -> dict[str, Any]:
    """Poll until the server shows ``status`` (with no task); end at once, with the fault,
    when it goes to ERROR or when its operation ends without reaching ``status``.

    The operation is the request ``request_id`` names (what the call returned), else the
    server's latest action (``workflows.api.waiting.Watched``)."""
    wanted = waiting.check_status(status)
    with session_scope(common.db_url(), read_only=True) as session:
        uuid = common.resolve_server(session, uuid)  # a uuid, or a name only one server has
        watched = waiting.Watched.of(session, uuid, request_id)
    deadline = time.monotonic() + timeout
    while True:
        with session_scope(common.db_url(), read_only=True) as session:
            # The action first: its end is written with (or after) the final state, so a
            # view read after it is at least that new.
            ended = watched.ended(session)
            view = views.instance_dict(session, get_instance(session, uuid))
            if view["status"] == wanted and (wanted == "ERROR" or view["task_state"] is None):
                return view
            # An ERROR at rest ends the wait; one with a task (a delete, a rebuild or an
            # evacuation of an errored server) is on its way to what was asked.
            if view["status"] == "ERROR" and wanted != "ERROR" and view["task_state"] is None:
                fault = view["fault"]["message"] if view["fault"] else "no fault recorded"
                raise InstanceErrored(uuid=uuid, fault=fault)
            if ended is not None:
                raise waiting.ended_without(session, ended, view, wanted)
            if view["status"] == "DELETED":  # it will reach no other status
                raise waiting.deleted(session, watched, view, wanted)
        if time.monotonic() >= deadline:
            raise WaitTimeout(uuid=uuid, status=wanted, timeout=timeout, actual=view["status"])
        time.sleep(interval)


@validated()
def diagnostics(uuid: str, timeout: Seconds = 30.0) -> dict[str, Any]:
    """Ask the server's host for its live view of the guest (power state, vcpus, memory,
    PCI addresses, domain XML)."""
    uuid = common.check_uuid(uuid)
    with session_scope(common.db_url(), read_only=True) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        if instance.host is None:
            raise InstanceInvalidState(
                action="diagnostics",
                uuid=uuid,
                vm_state=instance.vm_state,
                task_state=instance.task_state,
            )
        host = instance.host
    dispatch.check_broker()
    live = dispatch.call(step("compute.get_diagnostics", instance_uuid=uuid, host=host), timeout)
    return {**live, "power_state_name": views.power_state_name(live.get("power_state"))}


__all__ = [
    "boot",
    "update",
    "create_flavor",
    "delete",
    "diagnostics",
    "list_actions",
    "list_flavors",
    "list_instances",
    "show",
    "wait",
]
