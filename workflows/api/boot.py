"""The public API's boot: Nova's ``create`` of one or several servers.

Everything is checked before anything is written (names, counts, flavor, image against
the flavor, zone or forced host, server group, hints, metadata); the broker is checked;
then one transaction writes the servers (BUILD/scheduling) with their create actions,
group memberships and the operation's record in flight, and only after the commit is the
build workflow published. (On PostgreSQL the lookups run in that same transaction,
``models.read_then_write``: three round trips fewer.)
"""

from __future__ import annotations

import uuid as uuid_module
from dataclasses import dataclass
from typing import Annotated, Any, cast

from pydantic import BeforeValidator
from sqlalchemy import insert, select
from sqlalchemy.orm import Session
from typing_extensions import TypedDict

from compute import images
from compute import instance_actions as actions
from compute.pci import requests_from_extra_specs
from compute.states import TaskState, VmState
from models import Instance, ServerGroup
from models.flavor import FlavorSnapshot
from models.instance import DEFAULT_PROJECT_ID, DEFAULT_USER_ID, InstanceMetadata
from models.read_then_write import read_then_write
from models.states import PowerState
from models.tables import table_of
from novaq.exceptions import InvalidInput
from scheduler.request_spec import RequestSpec
from workflows import dispatch
from workflows.api import aggregates, common, flavors, server_metadata, submit
from workflows.api import hints as host_hints
from workflows.api.submit import Written
from workflows.api.validation import Int, Name, expect, validated
from workflows.build import build_workflow

#: The most servers one boot may create (novaq's stand-in for Nova's instances quota).
MAX_COUNT = 100

#: A scheduler hint's value: an instance uuid or a list of them (one is taken as a list).
Uuids = Annotated[
    list[str],
    BeforeValidator(lambda value: [value] if isinstance(value, str) else value),
    expect("an instance uuid or a list of them"),
]


class Hints(TypedDict, total=False):
    """The scheduler hints novaq knows (Nova's ``os:scheduler_hints``): servers to share
    a host with or to keep away from (uuids or names), ``group``, the server group
    (as ``boot(group=...)``), JsonFilter's ``query`` and SimpleCIDRAffinityFilter's
    ``build_near_host_ip`` and ``cidr`` (``workflows.api.hints``)."""

    same_host: Uuids
    different_host: Uuids
    group: Name
    query: host_hints.Query
    build_near_host_ip: host_hints.Address
    cidr: host_hints.Cidr


#: The hints that name servers.
SERVER_HINTS = ("same_host", "different_host")


@validated(
    labels={"name": "server name"},
    items={"hints": "scheduler hint", "metadata": "metadata"},
)
def boot(
    name: Name,
    flavor: Name,
    image: Name,
    count: Int = 1,
    availability_zone: Name | None = None,
    group: Name | None = None,
    hints: Hints | None = None,
    min_count: Int | None = None,
    max_count: Int | None = None,
    metadata: dict[str, str] | None = None,
    description: str | None = None,
    project: Name | None = None,
    user: Name | None = None,
) -> list[str]:
    """Create servers; returns their uuids at once (BUILD, then ACTIVE or ERROR).

    ``count`` servers, or as Nova: ``min_count`` (default 1) to ``max_count`` (default
    ``min_count``). With more than one, the names get ``-1``, ``-2``, ... The scheduler
    places every one or none (Nova's ``_ensure_sufficient_hosts``: all ERROR with
    NoValidHost). ``group``: a server group's uuid or name (also the ``group`` hint);
    ``metadata``: the servers' user metadata (``--property``). ``project`` and ``user``:
    who boots, the servers' owners (Nova's ``project_id``/``user_id``, what
    AggregateMultiTenancyIsolation reads); a private flavor ``project`` has no access to is
    not found. Without them the servers belong to the ``demo`` project and user, and the
    flavor is looked up as the operator, who may use every flavor."""
    flavors.check_name(name, "server name")
    flavors.check_name(image, "image")
    owner = _owner(project, user)
    number = _number_of_servers(count, min_count, max_count)
    extras = _checked_extras(group, hints, metadata, description)
    settings = common.settings()
    availability_zone = availability_zone or settings.default_schedule_zone
    force_hosts: tuple[str, ...] = ()
    if availability_zone and ":" in availability_zone:
        # Nova's "zone:host" boot syntax: force the host, bypassing the filters.
        zone, _, forced = availability_zone.partition(":")
        availability_zone, force_hosts = zone or None, (flavors.check_name(forced, "host"),)
    # The lookups, then the write: on PostgreSQL one transaction (models.read_then_write).
    with read_then_write(common.db_url()) as tx:
        with tx.reading() as session:
            snapshot, flavor_id = flavors.get_snapshot(session, flavor, project)
            boot_image = _boot_image(session, image, snapshot)
            for forced in force_hosts:
                common.check_compute_host(session, forced)
            if availability_zone is not None:
                flavors.check_name(availability_zone, "availability_zone")
                if availability_zone not in aggregates.known_zones(session, settings):
                    raise InvalidInput(
                        reason=f"availability zone {availability_zone!r} is not available"
                    )
            group_uuid = _group_uuid(session, extras.groups)
        pci_requests = tuple(requests_from_extra_specs(snapshot.extra_specs, common.settings()))
        dispatch.check_broker()
        request_id = common.new_request_id()
        specs = [
            RequestSpec(
                instance_uuid=str(uuid_module.uuid4()),
                flavor=snapshot,
                image=boot_image.id,
                image_name=boot_image.name,
                availability_zone=availability_zone,
                hints=extras.hints,
                group=group_uuid,
                num_instances=number,
                pci_requests=pci_requests,
                image_properties=dict(boot_image.properties),
                force_hosts=force_hosts,
                project_id=owner[0],
                user_id=owner[1],
            )
            for _ in range(number)
        ]
        workflow = build_workflow(request_id, specs)
        # What the write puts in is made before it begins: on SQLite the writer's BEGIN
        # takes the database's one write lock, held for the statements alone then (the
        # workflow's record and the rows' values: about a quarter of the time it was held).
        message = dispatch.message_of(workflow)
        rows = [
            _instance_row(
                spec, name if number == 1 else f"{name}-{index + 1}", flavor_id, boot_image, extras
            )
            for index, spec in enumerate(specs)
        ]
        # One write: the servers, their actions and group memberships, and the operation's
        # durable record (published once the block has committed them).
        session = tx.writer()
        for spec, row in zip(specs, rows, strict=True):
            _insert_instance(session, row, extras.metadata)
            actions.start_action(session, spec.instance_uuid, "create", request_id)
        if group_uuid is not None:
            aggregates.add_members(
                aggregates.get_server_group(session, group_uuid), [s.instance_uuid for s in specs]
            )
        recorded = dispatch.record(
            session,
            workflow,
            {s.instance_uuid: TaskState.SCHEDULING for s in specs},
            created=True,
            message=message,
        )
    created = tuple(s.instance_uuid for s in specs)
    submit.publish(workflow, Written(request_id, created, created=True), recorded)
    return list(created)


def _owner(project: str | None, user: str | None) -> tuple[str, str]:
    """The servers' (project_id, user_id): those given, checked, else the demo ones."""
    return (
        DEFAULT_PROJECT_ID if project is None else flavors.check_name(project, "project"),
        DEFAULT_USER_ID if user is None else flavors.check_name(user, "user"),
    )


def _number_of_servers(count: int, min_count: int | None, max_count: int | None) -> int:
    """How many servers a boot creates. Nova's API: ``max_count`` defaults to
    ``min_count``, which defaults to 1, and ``min_count <= max_count``; its quota check
    then lowers ``max_count`` to what the quota allows, refusing the request only when
    ``min_count`` does not fit. novaq's one limit is ``MAX_COUNT`` servers a request,
    applied the same way."""
    if min_count is None and max_count is None:
        if not 1 <= count <= MAX_COUNT:
            raise InvalidInput(
                reason=f"count must be an integer from 1 to {MAX_COUNT}, got {count!r}",
                field="count",
            )
        return count
    if count != 1:
        raise InvalidInput(reason="give count, or min_count and max_count, not both")
    low = 1 if min_count is None else min_count
    high = low if max_count is None else max_count
    for label, value in (("min_count", low), ("max_count", high)):
        if value < 1:
            raise InvalidInput(reason=f"{label} must be 1 or more, got {value}", field=label)
    if low > high:
        raise InvalidInput(
            reason=f"min_count must be <= max_count, got {low} > {high}", field="min_count"
        )
    if low > MAX_COUNT:
        raise InvalidInput(
            reason=f"min_count {low} is more than the {MAX_COUNT} servers a request may create",
            field="min_count",
        )
    return min(high, MAX_COUNT)


@dataclass(frozen=True, slots=True)
class _Extras:
    """What a boot asks beyond flavor, image and zone, checked: the scheduler hints
    (servers as uuids), the server group's reference, the metadata and description."""

    hints: dict[str, list[str]]
    groups: tuple[str, ...]
    metadata: dict[str, str]
    description: str | None


def _checked_extras(
    group: str | None,
    hints: Hints | None,
    metadata: dict[str, str] | None,
    description: str | None,
) -> _Extras:
    hint_values: dict[str, Any] = dict(hints or {})
    hinted = hint_values.pop("group", None)
    # Uuids made each value a list.
    servers = cast(
        dict[str, list[str]], {k: hint_values[k] for k in SERVER_HINTS if k in hint_values}
    )
    checked = host_hints.host_hints(hint_values)
    metadata = dict(metadata or {})
    server_metadata.check_metadata(metadata)
    server_metadata.check_count(metadata)
    # A server named in a hint is found by name too (one live server, or refused).
    checked.update({key: [common.check_uuid(v) for v in values] for key, values in servers.items()})
    return _Extras(
        hints=checked,
        groups=tuple(ref for ref in (group, hinted) if ref is not None),
        metadata=metadata,
        description=None if description is None else server_metadata.check_description(description),
    )


def _group_uuid(session: Any, refs: tuple[str, ...]) -> str | None:
    """The server group of a boot: ``group`` or the ``group`` hint (the same thing in
    Nova's API), by uuid or name; two naming different groups are refused."""
    found = {_find_group(session, ref).uuid for ref in refs}
    if len(found) > 1:
        raise InvalidInput(
            reason=f"group {refs[0]!r} and the group hint {refs[1]!r} name different groups",
            field="group",
        )
    return next(iter(found), None)


def _find_group(session: Any, ref: str) -> ServerGroup:
    """A server group by uuid, or by a name only one group has."""
    found = list(session.scalars(select(ServerGroup).where(ServerGroup.uuid == ref)))
    if not found:
        found = list(session.scalars(select(ServerGroup).where(ServerGroup.name == ref)))
    if not found:
        raise aggregates.ServerGroupNotFound(group=ref)
    if len(found) > 1:
        raise InvalidInput(
            reason=f"{len(found)} server groups are named {ref!r}; use a uuid", field="group"
        )
    return found[0]


@dataclass(frozen=True, slots=True)
class _BootImage:
    """What boot keeps of the image once it passed Nova's checks against the flavor."""

    id: str
    name: str
    properties: dict[str, str]
    system_metadata: dict[str, str]


def _boot_image(session: Any, ref: str, flavor: FlavorSnapshot) -> _BootImage:
    image = images.find_image_row(session, ref)
    images.check_bootable(image, flavor)
    return _BootImage(
        id=image.id,
        name=image.name,
        properties={k: str(v) for k, v in (image.properties or {}).items()},
        system_metadata=images.system_metadata(image, flavor),
    )


#: The INSERT of a new server's row, built once.
#: NOTE: Core, not ``session.add(Instance(...))``: the ORM's flush of the new row (its
#: validators, its unit of work) was about a sixth of ``api.boot``. The row is the same:
#: the columns given as the validators would have made them, the rest their defaults.
_INSERT_INSTANCE = insert(table_of(Instance))


def _instance_row(
    spec: RequestSpec,
    display_name: str,
    flavor_id: int,
    image: _BootImage,
    extras: _Extras,
) -> dict[str, Any]:
    """The new server's row (``_INSERT_INSTANCE``'s values)."""
    flavor = spec.flavor
    return {
        "uuid": spec.instance_uuid,
        "display_name": display_name,
        "description": extras.description,
        "flavor_id": flavor_id,
        "flavor": flavor,
        "image_ref": spec.image,
        "project_id": spec.project_id,
        "user_id": spec.user_id,
        # Nova's _inherit_properties_from_image: the property as the image gives it.
        "os_type": image.properties.get("os_type"),
        "vcpus": flavor.vcpus,
        "memory_mb": flavor.memory_mb,
        "root_gb": flavor.root_gb,
        "ephemeral_gb": flavor.ephemeral_gb,
        "vm_state": VmState.BUILDING,
        "task_state": TaskState.SCHEDULING,
        "power_state": PowerState.NOSTATE,
        "availability_zone": spec.availability_zone,
        "request_spec": spec.to_dict(),
        "system_metadata": dict(image.system_metadata),
    }


def _insert_instance(session: Session, row: dict[str, Any], metadata: dict[str, str]) -> None:
    """Write the server's row, then its user metadata (as ``server_metadata.replace``
    adds it to a new server: one row a key, in key order, flushed after the server).
    The INSERT on the session's connection (no ORM execution layer: about 30 us): nothing
    is pending in the session before a server's row (its metadata follows it)."""
    session.connection().execute(_INSERT_INSTANCE, row)
    session.add_all(
        InstanceMetadata(instance_uuid=row["uuid"], key=key, value=metadata[key])
        for key in sorted(metadata)
    )


__all__ = ["boot"]
