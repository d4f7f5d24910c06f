"""novaq's public Python API: ``from workflows import api``.

Every call returns at once: it validates, writes what it must in one short transaction,
and only then enqueues the workflow (broker checked first, so a down broker changes
nothing). ``wait`` polls the database. Bad input raises a ``novaq`` error before anything
is written or enqueued.
"""

from __future__ import annotations

import time
import uuid as uuid_module
from typing import Any

from sqlalchemy import select

from compute import instance_actions as actions
from compute.audit import audit_nodes
from compute.delete import local_delete
from compute.instance_state import get_instance
from compute.pci import requests_from_extra_specs
from compute.servicegroup import COMPUTE, is_up, service_dict
from compute.states import TaskState, VmState, api_status
from models import (
    Aggregate,
    ComputeNode,
    Instance,
    InstanceAction,
    ResourceHeal,
    ServerGroup,
    Service,
    utcnow,
)
from models.db import session_scope
from novaq.exceptions import (
    InstanceErrored,
    InstanceInvalidState,
    InstanceNotFound,
    InvalidInput,
    WaitTimeout,
)
from novaq.settings import Settings, get_settings
from scheduler.request_spec import RequestSpec
from workflows import aggregates, dispatch, flavors, views
from workflows.build import build_workflow
from workflows.delete import delete_workflow

MAX_COUNT = 100


def _settings() -> Settings:
    return get_settings()


def _db() -> str:
    return _settings().sqlalchemy_url


def _request_id() -> str:
    return f"req-{uuid_module.uuid4()}"


def _check_uuid(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInput(reason=f"instance uuid must be a string, got {value!r}")
    try:
        return str(uuid_module.UUID(value))
    except ValueError:
        raise InstanceNotFound(uuid=value) from None


# -- flavors -------------------------------------------------------------------------------


def create_flavor(
    name: str,
    vcpus: int,
    memory_mb: int,
    root_gb: int,
    ephemeral_gb: int = 0,
    swap: int = 0,
    extra_specs: dict[str, str] | None = None,
) -> dict[str, Any]:
    with session_scope(_db()) as session:
        flavor = flavors.create_flavor(
            session,
            name,
            vcpus,
            memory_mb,
            root_gb,
            ephemeral_gb,
            swap,
            extra_specs,
            settings=_settings(),
        )
        return flavors.flavor_dict(flavor)


def list_flavors() -> list[dict[str, Any]]:
    from models import Flavor

    with session_scope(_db()) as session:
        rows = session.scalars(select(Flavor).where(Flavor.disabled.is_(False)).order_by(Flavor.id))
        return [flavors.flavor_dict(f) for f in rows]


# -- build and delete ----------------------------------------------------------------------


def boot(
    name: str,
    flavor: str,
    image: str,
    count: int = 1,
    availability_zone: str | None = None,
    group: str | None = None,
    hints: dict[str, Any] | None = None,
) -> list[str]:
    """Create ``count`` servers; returns their uuids at once (BUILD, then ACTIVE or ERROR)."""
    flavors.check_name(name, "server name")
    flavors.check_name(image, "image")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
        raise InvalidInput(reason=f"count must be an integer from 1 to {MAX_COUNT}, got {count!r}")
    hints = _check_hints(hints)
    settings = _settings()
    availability_zone = availability_zone or settings.default_schedule_zone
    force_hosts: tuple[str, ...] = ()
    if isinstance(availability_zone, str) and ":" in availability_zone:
        # Nova's "zone:host" boot syntax: force the host, bypassing the filters.
        zone, _, forced = availability_zone.partition(":")
        availability_zone, force_hosts = zone or None, (flavors.check_name(forced, "host"),)
    with session_scope(_db()) as session:
        flavor_row = flavors.get_flavor(session, flavor)
        snapshot, flavor_id = flavors.flavor_dict(flavor_row), flavor_row.id
        if availability_zone is not None:
            flavors.check_name(availability_zone, "availability_zone")
            if availability_zone not in aggregates.known_zones(session, settings):
                raise InvalidInput(
                    reason=f"availability zone {availability_zone!r} is not available"
                )
        group_uuid = None if group is None else aggregates.get_server_group(session, group).uuid
    pci_requests = tuple(requests_from_extra_specs(snapshot["extra_specs"], _settings()))
    dispatch.check_broker()
    request_id = _request_id()
    with session_scope(_db()) as session:
        specs = []
        for index in range(count):
            display = name if count == 1 else f"{name}-{index + 1}"
            spec = RequestSpec(
                instance_uuid=str(uuid_module.uuid4()),
                flavor=snapshot,
                image=image,
                availability_zone=availability_zone,
                hints=hints,
                group=group_uuid,
                num_instances=count,
                pci_requests=pci_requests,
                image_properties=settings.image_properties(image),
                force_hosts=force_hosts,
            )
            session.add(_new_instance(spec, display, flavor_id))
            actions.start_action(session, spec.instance_uuid, "create", request_id)
            specs.append(spec)
        if group_uuid is not None:
            aggregates.add_members(
                aggregates.get_server_group(session, group_uuid), [s.instance_uuid for s in specs]
            )
    _send_or_undo([build_workflow(request_id, specs)], specs)
    return [s.instance_uuid for s in specs]


HINTS = ("same_host", "different_host")


def _check_hints(hints: Any) -> dict[str, Any]:
    """Scheduler hints novaq knows: ``same_host`` / ``different_host`` (instance uuids)."""
    if hints is None:
        return {}
    if not isinstance(hints, dict):
        raise InvalidInput(reason=f"hints must be a mapping, got {hints!r}")
    unknown = set(hints) - set(HINTS)
    if unknown:
        raise InvalidInput(reason=f"unknown scheduler hint(s): {', '.join(sorted(unknown))}")
    checked: dict[str, Any] = {}
    for key, value in hints.items():
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise InvalidInput(reason=f"hint {key} must be an instance uuid or a list of them")
        checked[key] = [_check_uuid(v) for v in values]
    return checked


def _new_instance(spec: RequestSpec, display_name: str, flavor_id: int) -> Instance:
    flavor = spec.flavor
    return Instance(
        uuid=spec.instance_uuid,
        display_name=display_name,
        flavor_id=flavor_id,
        flavor=flavor,
        image_ref=spec.image,
        vcpus=flavor["vcpus"],
        memory_mb=flavor["memory_mb"],
        root_gb=flavor["root_gb"],
        ephemeral_gb=flavor["ephemeral_gb"],
        vm_state=VmState.BUILDING,
        task_state=TaskState.SCHEDULING,
        power_state=0,
        availability_zone=spec.availability_zone,
        request_spec=spec.to_dict(),
        system_metadata={},
    )


def _send_or_undo(workflows: list[Any], specs: list[RequestSpec]) -> None:
    """Publish; if the broker fails after the commit, delete the rows just written, so a
    failed request leaves nothing behind."""
    try:
        for workflow in workflows:
            dispatch.send(workflow)
    except Exception:
        with session_scope(_db()) as session:
            for spec in specs:
                instance = get_instance(session, spec.instance_uuid)
                if instance.task_state == TaskState.SCHEDULING and instance.host is None:
                    session.delete(instance)
        raise


def delete(uuid: str) -> str:
    """Delete a server (any state). Returns the action's request id."""
    uuid = _check_uuid(uuid)
    s = _settings()
    request_id = _request_id()
    with session_scope(_db()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        if instance.task_state == TaskState.DELETING:
            # Nova ignores a repeated delete while one is in progress.
            previous = _last_action(session, uuid, "delete")
            if previous is not None:
                return previous.request_id
        host = instance.host
        host_up = host is not None and _host_is_up(session, host, s)
    if not host_up:
        # Nova's local delete: no host, or a host that is down.
        with session_scope(_db()) as session:
            actions.start_action(session, uuid, "delete", request_id)
        local_delete(_db(), uuid, request_id)
        return request_id
    assert host is not None
    dispatch.check_broker()
    with session_scope(_db()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        instance.task_state = TaskState.DELETING
        instance.updated_at = utcnow()
        actions.start_action(session, uuid, "delete", request_id)
    dispatch.send(delete_workflow(uuid, request_id, host))
    return request_id


def _host_is_up(session: Any, host: str, s: Settings) -> bool:
    service = session.scalars(
        select(Service).where(Service.host == host, Service.binary == COMPUTE, Service.deleted == 0)
    ).first()
    return service is not None and is_up(service, s)


def _last_action(session: Any, uuid: str, action: str) -> InstanceAction | None:
    return session.scalars(
        select(InstanceAction)
        .where(InstanceAction.instance_uuid == uuid, InstanceAction.action == action)
        .order_by(InstanceAction.id.desc())
    ).first()


# -- queries -------------------------------------------------------------------------------


def show(uuid: str) -> dict[str, Any]:
    uuid = _check_uuid(uuid)
    with session_scope(_db()) as session:
        return views.instance_dict(session, get_instance(session, uuid))


def list_instances(**filters: Any) -> list[dict[str, Any]]:
    """Servers, newest last. Filters: host, name, vm_state, status, deleted (bool)."""
    known = {"host", "name", "vm_state", "status", "deleted"}
    unknown = set(filters) - known
    if unknown:
        raise InvalidInput(reason=f"unknown filter(s): {', '.join(sorted(unknown))}")
    query = select(Instance).order_by(Instance.id)
    if not filters.get("deleted"):
        query = query.where(Instance.deleted == 0)
    if "host" in filters:
        query = query.where(Instance.host == filters["host"])
    if "name" in filters:
        query = query.where(Instance.display_name == filters["name"])
    if "vm_state" in filters:
        query = query.where(Instance.vm_state == filters["vm_state"])
    with session_scope(_db()) as session:
        rows = [views.instance_dict(session, i) for i in session.scalars(query)]
    if "status" in filters:
        rows = [r for r in rows if r["status"] == str(filters["status"]).upper()]
    return rows


def list_hosts() -> list[dict[str, Any]]:
    s = _settings()
    with session_scope(_db()) as session:
        services = {
            sv.host: service_dict(sv, s)
            for sv in session.scalars(
                select(Service).where(Service.binary == COMPUTE, Service.deleted == 0)
            )
        }
        nodes = session.scalars(
            select(ComputeNode).where(ComputeNode.deleted == 0).order_by(ComputeNode.host)
        )
        return [views.host_dict(n, services.get(n.host)) for n in nodes]


def list_services() -> list[dict[str, Any]]:
    s = _settings()
    with session_scope(_db()) as session:
        rows = session.scalars(
            select(Service).where(Service.deleted == 0).order_by(Service.binary, Service.host)
        )
        return [service_dict(sv, s) for sv in rows]


def list_actions(uuid: str) -> list[dict[str, Any]]:
    uuid = _check_uuid(uuid)
    with session_scope(_db()) as session:
        get_instance(session, uuid)
        rows = session.scalars(
            select(InstanceAction)
            .where(InstanceAction.instance_uuid == uuid)
            .order_by(InstanceAction.id)
        )
        return [views.action_dict(a) for a in rows]


def wait(uuid: str, status: str, timeout: float = 120.0, interval: float = 0.2) -> dict[str, Any]:
    """Poll until the server shows ``status``; raise with the fault if it goes to ERROR."""
    wanted = status.upper()
    deadline = time.monotonic() + timeout
    while True:
        view = show(uuid)
        if view["status"] == wanted and (wanted == "ERROR" or view["task_state"] is None):
            return view
        if view["status"] == "ERROR" and wanted != "ERROR":
            fault = view["fault"]["message"] if view["fault"] else "no fault recorded"
            raise InstanceErrored(uuid=uuid, fault=fault)
        if time.monotonic() >= deadline:
            raise WaitTimeout(uuid=uuid, status=wanted, timeout=timeout, actual=view["status"])
        time.sleep(interval)


def diagnostics(uuid: str, timeout: float = 30.0) -> dict[str, Any]:
    """Ask the server's host for its live view of the guest (power state, vcpus, memory,
    PCI addresses, domain XML)."""
    from tasks.compute import get_diagnostics

    uuid = _check_uuid(uuid)
    with session_scope(_db()) as session:
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
    return dispatch.call(get_diagnostics.si(instance_uuid=uuid, host=host), timeout)


# -- aggregates, availability zones and server groups --------------------------------------


def create_aggregate(name: str, availability_zone: str | None = None) -> dict[str, Any]:
    with session_scope(_db()) as session:
        return aggregates.aggregate_dict(
            aggregates.create_aggregate(session, name, availability_zone)
        )


def add_host_to_aggregate(aggregate_id: int, host: str) -> dict[str, Any]:
    with session_scope(_db()) as session:
        aggregate = aggregates.get_aggregate(session, aggregate_id)
        known = set(session.scalars(select(Service.host).where(Service.binary == COMPUTE)))
        aggregates.add_host(session, aggregate, host, known)
        session.flush()
        return aggregates.aggregate_dict(aggregate)


def remove_host_from_aggregate(aggregate_id: int, host: str) -> dict[str, Any]:
    with session_scope(_db()) as session:
        aggregate = aggregates.get_aggregate(session, aggregate_id)
        rows = [h for h in aggregate.hosts if h.host == host]
        if not rows:
            raise InvalidInput(reason=f"host {host!r} is not in aggregate {aggregate.name}")
        aggregate.hosts.remove(rows[0])
        session.flush()
        return aggregates.aggregate_dict(aggregate)


def set_aggregate_metadata(aggregate_id: int, metadata: dict[str, Any]) -> dict[str, Any]:
    with session_scope(_db()) as session:
        aggregate = aggregates.get_aggregate(session, aggregate_id)
        aggregates.set_metadata(session, aggregate, metadata)
        session.flush()
        return aggregates.aggregate_dict(aggregate)


def list_aggregates() -> list[dict[str, Any]]:
    with session_scope(_db()) as session:
        return [
            aggregates.aggregate_dict(a)
            for a in session.scalars(select(Aggregate).order_by(Aggregate.id))
        ]


def create_server_group(
    name: str, policy: str, rules: dict[str, Any] | None = None
) -> dict[str, Any]:
    with session_scope(_db()) as session:
        return aggregates.group_dict(aggregates.create_server_group(session, name, policy, rules))


def list_server_groups() -> list[dict[str, Any]]:
    with session_scope(_db()) as session:
        rows = session.scalars(select(ServerGroup).order_by(ServerGroup.id))
        return [aggregates.group_dict(g) for g in rows]


def audit(timeout: float = 10.0) -> dict[str, Any]:
    """The accounting check: per node, usage by allocations, by instances and moves, and by
    the hypervisor (asked live on every up host), with every discrepancy. ``leaks`` counts
    the discrepancies that are accounting errors (see ``compute.audit``)."""
    from tasks.compute import hypervisor_view

    s = _settings()
    with session_scope(_db()) as session:
        up_hosts = [
            sv.host
            for sv in session.scalars(
                select(Service).where(Service.binary == COMPUTE, Service.deleted == 0)
            )
            if is_up(sv, s)
        ]
    hypervisors: dict[str, dict[str, Any] | None] = {}
    if up_hosts:
        dispatch.check_broker()
        pending = {h: dispatch.send(hypervisor_view.si(host=h)) for h in up_hosts}
        for host, result in pending.items():
            try:
                hypervisors[host] = result.get(timeout=timeout)
            except Exception:  # noqa: BLE001 - a host that does not answer is reported as such
                hypervisors[host] = None
            finally:
                result.forget()
    with session_scope(_db()) as session:
        return audit_nodes(session, hypervisors)


def list_heals(host: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
    """What ``update_available_resource`` corrected, newest first."""
    query = select(ResourceHeal).order_by(ResourceHeal.id.desc()).limit(limit)
    if host:
        query = query.where(ResourceHeal.host == host)
    with session_scope(_db()) as session:
        return [
            {
                "created_at": h.created_at.isoformat(),
                "host": h.host,
                "node": h.node,
                "consumer_uuid": h.consumer_uuid,
                "action": h.action,
                "resources": h.resources,
                "reason": h.reason,
            }
            for h in session.scalars(query)
        ]


def status_of(vm_state: str, task_state: str | None) -> str:
    return api_status(vm_state, task_state)
