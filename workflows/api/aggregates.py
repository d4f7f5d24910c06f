"""Aggregates, availability zones and server groups (API side)."""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import (
    Aggregate,
    AggregateHost,
    AggregateMetadata,
    Instance,
    ServerGroup,
    ServerGroupMember,
)
from models.server_group import POLICIES
from novaq.exceptions import ComputeHostNotFound, InvalidInput, NotFound
from novaq.settings import Settings
from workflows.api.flavors import check_name
from workflows.api.validation import shown, text_problem

AZ_KEY = "availability_zone"


class AggregateNotFound(NotFound):
    msg_fmt = "Aggregate %(aggregate)s could not be found."


class ServerGroupNotFound(NotFound):
    msg_fmt = "Server group %(group)s could not be found."


class InvalidAggregateAction(InvalidInput):
    """Nova's ``InvalidAggregateAction*``: what the aggregate's hosts forbid."""

    msg_fmt = "Cannot %(action)s aggregate %(aggregate_id)s. Reason: %(reason)s."


class AggregateHostNotFound(NotFound):
    msg_fmt = "Aggregate %(aggregate_id)s has no host %(host)s."


def aggregate_dict(aggregate: Aggregate) -> dict[str, Any]:
    metadata = aggregate.metadata_dict
    return {
        "id": aggregate.id,
        "uuid": aggregate.uuid,
        "name": aggregate.name,
        "availability_zone": metadata.get(AZ_KEY),
        "hosts": [h.host for h in aggregate.hosts],
        "metadata": metadata,
    }


def create_aggregate(
    session: Session, name: str, availability_zone: str | None = None
) -> Aggregate:
    check_name(name, "aggregate name")
    if session.scalars(select(Aggregate.id).where(Aggregate.name == name)).first() is not None:
        raise InvalidInput(reason=f"an aggregate named {name!r} already exists")
    aggregate = Aggregate(uuid=str(uuid_module.uuid4()), name=name)
    if availability_zone is not None:
        check_zone(availability_zone)
        aggregate.metadata_items = [AggregateMetadata(key=AZ_KEY, value=availability_zone)]
    session.add(aggregate)
    session.flush()
    return aggregate


def check_zone(zone: str) -> str:
    """A zone a host can be put in: Nova refuses ':' in it, since ``zone:host`` at boot
    forces a host."""
    check_name(zone, "availability_zone")
    if ":" in zone:
        raise InvalidInput(reason=f"availability_zone must not contain ':', got {zone!r}")
    return zone


def get_aggregate(session: Session, aggregate_id: int) -> Aggregate:
    aggregate = session.get(Aggregate, aggregate_id)
    if aggregate is None:
        raise AggregateNotFound(aggregate=aggregate_id)
    return aggregate


def delete_aggregate(session: Session, aggregate: Aggregate) -> None:
    """Delete an empty aggregate (its metadata with it); one with hosts is refused."""
    if aggregate.hosts:
        raise InvalidAggregateAction(
            action="remove", aggregate_id=aggregate.id, reason="Host aggregate is not empty"
        )
    session.delete(aggregate)


def remove_host(session: Session, aggregate: Aggregate, host: str, known_hosts: set[str]) -> None:
    """Take ``host`` out of ``aggregate``; refused, as Nova, if that would move the zone
    of servers on the host (Nova cannot change a server's zone that way)."""
    check_name(host, "host")
    if host not in known_hosts:
        raise ComputeHostNotFound(host=host)
    rows = [h for h in aggregate.hosts if h.host == host]
    if not rows:
        raise AggregateHostNotFound(aggregate_id=aggregate.id, host=host)
    current = aggregate.metadata_dict.get(AZ_KEY)
    servers = _servers_on(session, [host])
    after = _host_zones(session, host, excluding=aggregate.id)
    if current is not None and current not in after and servers:
        raise InvalidAggregateAction(
            action="remove host from",
            aggregate_id=aggregate.id,
            reason=(
                f"the availability zone of host {host} would change from {current!r} to "
                f"{sorted(after)[0] if after else None!r} but it has {servers} server(s); "
                "move them away first"
            ),
        )
    aggregate.hosts.remove(rows[0])


def _servers_on(session: Session, hosts: list[str]) -> int:
    return int(
        session.scalar(
            select(func.count())
            .select_from(Instance)
            .where(Instance.host.in_(hosts), Instance.deleted == 0)
        )
        or 0
    )


def _host_zones(session: Session, host: str, excluding: int | None = None) -> set[str]:
    """The zones ``host``'s aggregates (but ``excluding``) put it in."""
    query = (
        select(AggregateMetadata.value)
        .join(AggregateHost, AggregateHost.aggregate_id == AggregateMetadata.aggregate_id)
        .where(AggregateHost.host == host, AggregateMetadata.key == AZ_KEY)
    )
    if excluding is not None:
        query = query.where(AggregateMetadata.aggregate_id != excluding)
    return set(session.scalars(query))


def host_zone(session: Session, host: str, settings: Settings) -> str:
    """The availability zone of a compute host: its aggregates' zone, else the default."""
    zones = sorted(_host_zones(session, host))
    return ",".join(zones) if zones else settings.default_availability_zone


def host_aggregate_names(session: Session, host: str) -> list[str]:
    return list(
        session.scalars(
            select(Aggregate.name)
            .join(AggregateHost, AggregateHost.aggregate_id == Aggregate.id)
            .where(AggregateHost.host == host)
            .order_by(Aggregate.name)
        )
    )


def add_host(session: Session, aggregate: Aggregate, host: str, known_hosts: set[str]) -> None:
    check_name(host, "host")
    if host not in known_hosts:
        raise ComputeHostNotFound(host=host)
    if host in {h.host for h in aggregate.hosts}:
        raise InvalidInput(reason=f"host {host} is already in aggregate {aggregate.name}")
    zone = aggregate.metadata_dict.get(AZ_KEY)
    if zone is not None:
        _check_single_zone(session, host, zone, aggregate.id)
    aggregate.hosts.append(AggregateHost(host=host))


def _check_single_zone(session: Session, host: str, zone: str, aggregate_id: int) -> None:
    """Nova refuses a host in two availability zones."""
    rows = session.execute(
        select(AggregateMetadata.value)
        .join(AggregateHost, AggregateHost.aggregate_id == AggregateMetadata.aggregate_id)
        .where(
            AggregateHost.host == host,
            AggregateMetadata.key == AZ_KEY,
            AggregateMetadata.aggregate_id != aggregate_id,
        )
    ).scalars()
    other = {z for z in rows if z != zone}
    if other:
        raise InvalidInput(reason=f"host {host} is already in availability zone {sorted(other)[0]}")


def set_metadata(
    session: Session, aggregate: Aggregate, metadata: Mapping[str, str | int | float | None]
) -> None:
    """Set keys; a value of None removes its key (Nova's aggregate set-metadata; a key
    not set is no error). The zone, as Nova: never unset, and not changed while the
    aggregate's hosts have servers."""
    if not metadata:
        raise InvalidInput(reason="metadata must be a non-empty mapping")
    if AZ_KEY in metadata:
        _check_zone_change(session, aggregate, metadata[AZ_KEY])
    items = {m.key: m for m in aggregate.metadata_items}
    for key, value in metadata.items():
        check_name(key, "metadata key")
        if value is None:
            if key in items:
                aggregate.metadata_items.remove(items[key])
            continue
        problem = text_problem(str(value), minimum=0)  # Nova: 0 to 255 characters
        if problem is not None:
            raise InvalidInput(reason=f"metadata {key} must be {problem}, got {shown(value)}")
        if key == AZ_KEY:
            check_zone(str(value))
            for host in aggregate.hosts:
                _check_single_zone(session, host.host, str(value), aggregate.id)
        if key in items:
            items[key].value = str(value)
        else:
            aggregate.metadata_items.append(AggregateMetadata(key=key, value=str(value)))


def _check_zone_change(
    session: Session, aggregate: Aggregate, zone: str | int | float | None
) -> None:
    if zone is None or zone == "":
        raise InvalidAggregateAction(
            action="update metadata of",
            aggregate_id=aggregate.id,
            reason=f"Aggregate {aggregate.name} does not support empty named availability zone",
        )
    changed = str(zone) != aggregate.metadata_dict.get(AZ_KEY)
    if changed and _servers_on(session, [h.host for h in aggregate.hosts]):
        raise InvalidAggregateAction(
            action="update metadata of",
            aggregate_id=aggregate.id,
            reason="One or more hosts contain instances in this zone",
        )


def known_zones(session: Session, settings: Settings) -> set[str]:
    zones = set(
        session.scalars(select(AggregateMetadata.value).where(AggregateMetadata.key == AZ_KEY))
    )
    return zones | {settings.default_availability_zone}


# -- server groups -------------------------------------------------------------------------


def group_dict(group: ServerGroup) -> dict[str, Any]:
    return {
        "id": group.uuid,
        "name": group.name,
        "policy": group.policy,
        "rules": dict(group.rules or {}),
        "members": [m.instance_uuid for m in group.members],
    }


def create_server_group(
    session: Session, name: str, policy: str, max_server_per_host: int | None = None
) -> ServerGroup:
    """A group with its one possible rule, ``max_server_per_host`` (anti-affinity)."""
    check_name(name, "server group name")
    if policy not in POLICIES:
        raise InvalidInput(reason=f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    rules: dict[str, int] = {}
    if max_server_per_host is not None:
        if policy != "anti-affinity" or max_server_per_host < 1:
            raise InvalidInput(
                reason="max_server_per_host is a positive integer, for anti-affinity only"
            )
        rules["max_server_per_host"] = max_server_per_host
    group = ServerGroup(uuid=str(uuid_module.uuid4()), name=name, policy=policy, rules=rules)
    session.add(group)
    session.flush()
    return group


def get_server_group(session: Session, ref: str) -> ServerGroup:
    """A server group by uuid, or by a name only one group has (as the openstack client
    finds it)."""
    group = session.scalars(select(ServerGroup).where(ServerGroup.uuid == ref)).first()
    if group is not None:
        return group
    named = list(session.scalars(select(ServerGroup).where(ServerGroup.name == ref)))
    if len(named) > 1:
        raise InvalidInput(
            reason=f"{len(named)} server groups are named {ref!r}; use a uuid to be more specific"
        )
    if not named:
        raise ServerGroupNotFound(group=ref)
    return named[0]


def delete_server_group(session: Session, group: ServerGroup) -> None:
    """Delete a group and its membership; its servers go on running, out of any group."""
    session.delete(group)


def find_aggregate(session: Session, ref: int | str) -> Aggregate:
    """An aggregate by id, or by name (a name of digits is taken as an id first, as the
    nova client does)."""
    if isinstance(ref, int):
        return get_aggregate(session, ref)
    if ref.isascii() and ref.isdigit():
        found = session.get(Aggregate, int(ref))
        if found is not None:
            return found
    aggregate = session.scalars(select(Aggregate).where(Aggregate.name == ref)).first()
    if aggregate is None:
        raise AggregateNotFound(aggregate=ref)
    return aggregate


def add_members(group: ServerGroup, instance_uuids: list[str]) -> None:
    group.members.extend(ServerGroupMember(instance_uuid=u) for u in instance_uuids)
