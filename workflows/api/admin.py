"""The public API for operators: hosts, services, aggregates, zones, server groups,
the accounting audit and its heals."""

from __future__ import annotations

import time
from typing import Annotated, Any

from sqlalchemy import select
from typing_extensions import TypedDict

from compute import servicegroup
from compute.audit import audit_nodes
from compute.periodic import beat_lease, runs
from compute.periodic.schedule import BY_NAME, PERIODIC_TASKS
from compute.servicegroup import COMPUTE, is_up, service_dict
from models import Aggregate, ComputeNode, ResourceHeal, ServerGroup, Service
from models.db import session_scope
from novaq.exceptions import InvalidInput
from workflows import dispatch
from workflows.api import aggregates, common, views
from workflows.api.flavors import check_name
from workflows.api.validation import Int, Name, Seconds, expect, validated
from workflows.canvas import step
from workflows.periodic import send_now

#: An aggregate metadata value: a string (a number is taken as its string); None removes.
MetadataValue = Annotated[str | int | float | None, expect("a string")]
#: An aggregate by id or by name.
AggregateRef = Annotated[int | str, expect("an aggregate id or name")]


class ServerGroupRules(TypedDict, total=False):
    """The rules a server group may have (Nova's, microversion 2.64)."""

    max_server_per_host: Int


@validated()
def list_hosts() -> list[dict[str, Any]]:
    s = common.settings()
    with session_scope(common.db_url(), read_only=True) as session:
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


@validated()
def list_services() -> list[dict[str, Any]]:
    s = common.settings()
    with session_scope(common.db_url(), read_only=True) as session:
        rows = session.scalars(
            select(Service).where(Service.deleted == 0).order_by(Service.binary, Service.host)
        )
        return [service_dict(sv, s) for sv in rows]


@validated()
def disable_service(
    host: Name, reason: Name | None = None, binary: str = COMPUTE
) -> dict[str, Any]:
    """Disable a service: the scheduler stops picking a disabled compute host, and beat
    stops sending it periodic tasks. Its servers keep running."""
    with session_scope(common.db_url()) as session:
        service = servicegroup.set_disabled(session, host, True, reason, binary)
        return service_dict(service, common.settings())


@validated()
def enable_service(host: Name, binary: str = COMPUTE) -> dict[str, Any]:
    with session_scope(common.db_url()) as session:
        service = servicegroup.set_disabled(session, host, False, None, binary)
        return service_dict(service, common.settings())


@validated()
def force_down_service(host: Name, forced_down: bool = True) -> dict[str, Any]:
    """Mark a compute host down now (e.g. fenced) instead of waiting for
    ``service_down_time``; ``forced_down=False`` lets its heartbeats count again."""
    with session_scope(common.db_url()) as session:
        service = servicegroup.set_forced_down(session, host, forced_down)
        return service_dict(service, common.settings())


# -- periodic maintenance --------------------------------------------------------------------


@validated()
def list_periodic_tasks() -> list[dict[str, Any]]:
    """Every periodic task: its spacing and option, whether beat runs it, why it idles, and
    its last run on each host (from the database)."""
    s = common.settings()
    last = runs.last_runs(common.sessions())
    listed = []
    for task in PERIODIC_TASKS:
        spacing = task.effective_spacing(s)
        listed.append(
            {
                "name": task.name,
                "task": task.task_name,
                "scope": task.scope,
                "spacing_option": task.spacing_option or "(fixed)",
                "spacing": spacing,
                "enabled": spacing is not None,
                "run_immediately": task.run_immediately,
                "idle_because": task.gate_reason(s),
                "doc": task.doc,
                "runs": sorted(
                    (r for (name, _), r in last.items() if name == task.name),
                    key=lambda r: r["host"],
                ),
            }
        )
    return listed


@validated()
def beat_status() -> dict[str, Any] | None:
    """Who holds the beat lease, if a beat is running."""
    lease = beat_lease.holder_of(common.sessions())
    if lease is None:
        return None
    return {"holder": lease.holder, "since": lease.acquired_at.isoformat()}


@validated()
def run_periodic_task(name: str, host: Name | None = None) -> list[str]:
    """Send one periodic task now: to ``host``, or to every up and enabled compute host
    (a cluster task ignores ``host``). Returns the task ids."""
    if name not in BY_NAME:
        raise InvalidInput(reason=f"unknown periodic task {name!r}; see periodic-list")
    if host is not None and BY_NAME[name].per_host:
        with session_scope(common.db_url(), read_only=True) as session:
            servicegroup.get_service(session, host)
    dispatch.check_broker()
    return send_now(name, host)


# -- aggregates, availability zones and server groups --------------------------------------


@validated(labels={"name": "aggregate name"})
def create_aggregate(name: Name, availability_zone: str | None = None) -> dict[str, Any]:
    with session_scope(common.db_url()) as session:
        return aggregates.aggregate_dict(
            aggregates.create_aggregate(session, name, availability_zone)
        )


@validated(labels={"aggregate_id": "aggregate id"})
def add_host_to_aggregate(aggregate_id: Int, host: Name) -> dict[str, Any]:
    with session_scope(common.db_url()) as session:
        aggregate = aggregates.get_aggregate(session, aggregate_id)
        known = set(
            session.scalars(
                select(Service.host).where(Service.binary == COMPUTE, Service.deleted == 0)
            )
        )
        aggregates.add_host(session, aggregate, host, known)
        session.flush()
        return aggregates.aggregate_dict(aggregate)


@validated(labels={"aggregate_id": "aggregate id"})
def remove_host_from_aggregate(aggregate_id: Int, host: Name) -> dict[str, Any]:
    """Take a compute host out of an aggregate (refused if that would change the zone of
    servers on it, as Nova)."""
    with session_scope(common.db_url()) as session:
        aggregate = aggregates.get_aggregate(session, aggregate_id)
        aggregates.remove_host(session, aggregate, host, _compute_hosts(session))
        session.flush()
        return aggregates.aggregate_dict(aggregate)


def _compute_hosts(session: Any) -> set[str]:
    return set(
        session.scalars(select(Service.host).where(Service.binary == COMPUTE, Service.deleted == 0))
    )


@validated()
def show_aggregate(aggregate: AggregateRef) -> dict[str, Any]:
    """An aggregate by id or name: its zone, hosts and metadata."""
    with session_scope(common.db_url(), read_only=True) as session:
        return aggregates.aggregate_dict(_aggregate(session, aggregate))


@validated()
def delete_aggregate(aggregate: AggregateRef) -> dict[str, Any]:
    """Delete an aggregate with no host in it (refused otherwise, as Nova); returns it."""
    with session_scope(common.db_url()) as session:
        row = _aggregate(session, aggregate)
        view = aggregates.aggregate_dict(row)
        aggregates.delete_aggregate(session, row)
        return view


def _aggregate(session: Any, ref: int | str) -> Aggregate:
    if isinstance(ref, str):
        check_name(ref, "aggregate")
    return aggregates.find_aggregate(session, ref)


@validated(labels={"aggregate_id": "aggregate id"}, items={"metadata": "metadata"})
def set_aggregate_metadata(
    aggregate_id: Int, metadata: dict[Name, MetadataValue]
) -> dict[str, Any]:
    with session_scope(common.db_url()) as session:
        aggregate = aggregates.get_aggregate(session, aggregate_id)
        aggregates.set_metadata(session, aggregate, metadata)
        session.flush()
        return aggregates.aggregate_dict(aggregate)


@validated()
def list_aggregates() -> list[dict[str, Any]]:
    with session_scope(common.db_url(), read_only=True) as session:
        return [
            aggregates.aggregate_dict(a)
            for a in session.scalars(select(Aggregate).order_by(Aggregate.id))
        ]


@validated(labels={"name": "server group name"}, items={"rules": "server group rule"})
def create_server_group(
    name: Name, policy: str, rules: ServerGroupRules | None = None
) -> dict[str, Any]:
    with session_scope(common.db_url()) as session:
        return aggregates.group_dict(
            aggregates.create_server_group(
                session, name, policy, (rules or {}).get("max_server_per_host")
            )
        )


@validated(labels={"group": "server group"})
def show_server_group(group: Name) -> dict[str, Any]:
    """A server group by uuid or name: policy, rules and members."""
    with session_scope(common.db_url(), read_only=True) as session:
        return aggregates.group_dict(aggregates.get_server_group(session, group))


@validated(labels={"group": "server group"})
def delete_server_group(group: Name) -> dict[str, Any]:
    """Delete a server group; its servers keep running, in no group. Returns it."""
    with session_scope(common.db_url()) as session:
        row = aggregates.get_server_group(session, group)
        view = aggregates.group_dict(row)
        aggregates.delete_server_group(session, row)
        return view


@validated()
def list_server_groups() -> list[dict[str, Any]]:
    with session_scope(common.db_url(), read_only=True) as session:
        rows = session.scalars(select(ServerGroup).order_by(ServerGroup.id))
        return [aggregates.group_dict(g) for g in rows]


@validated()
def audit(timeout: Seconds = 10.0, hosts: list[Name] | None = None) -> dict[str, Any]:
    """The accounting check: per node, usage by allocations, by instances and moves, and by
    the hypervisor (asked live on every up host), with every discrepancy. ``leaks`` counts
    the discrepancies that are accounting errors (see ``compute.audit``). ``hosts``: only
    those hosts' nodes (each must be a compute host). Every host is asked at once and
    given ``timeout`` in all: hosts that do not answer cost one timeout, not one each."""
    s = common.settings()
    with session_scope(common.db_url(), read_only=True) as session:
        for host in hosts or ():
            common.check_compute_host(session, host)
        up_hosts = [
            sv.host
            for sv in session.scalars(
                select(Service).where(Service.binary == COMPUTE, Service.deleted == 0)
            )
            if is_up(sv, s) and (hosts is None or sv.host in hosts)
        ]
    hypervisors: dict[str, dict[str, Any] | None] = {}
    if up_hosts:
        dispatch.check_broker()
        pending = {
            h: dispatch.send(step("compute.hypervisor_view", host=h), record=False)
            for h in up_hosts
        }
        deadline = time.monotonic() + timeout
        for host, result in pending.items():
            try:
                hypervisors[host] = result.get(timeout=max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - a host that does not answer is reported as such
                hypervisors[host] = None
            finally:
                result.forget()
    # One snapshot: an operation committing between the audit's reads is not a leak.
    with session_scope(common.db_url(), snapshot=True, read_only=True) as session:
        return audit_nodes(session, hypervisors, hosts)


@validated()
def list_heals(host: Name | None = None, limit: Int = 100) -> list[dict[str, Any]]:
    """What ``update_available_resource`` corrected, newest first."""
    if limit < 0:  # SQL would take a negative LIMIT for "no limit"
        raise InvalidInput(reason=f"limit must be an integer >= 0, got {limit}", field="limit")
    query = select(ResourceHeal).order_by(ResourceHeal.id.desc()).limit(limit)
    if host:
        query = query.where(ResourceHeal.host == host)
    with session_scope(common.db_url(), read_only=True) as session:
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


__all__ = [
    "add_host_to_aggregate",
    "audit",
    "beat_status",
    "create_aggregate",
    "create_server_group",
    "delete_aggregate",
    "delete_server_group",
    "disable_service",
    "enable_service",
    "force_down_service",
    "list_periodic_tasks",
    "run_periodic_task",
    "list_aggregates",
    "list_heals",
    "list_hosts",
    "list_server_groups",
    "list_services",
    "remove_host_from_aggregate",
    "set_aggregate_metadata",
    "show_aggregate",
    "show_server_group",
]
