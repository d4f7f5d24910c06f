"""``InstanceRow``: the columns of an instance a light step works with, read as a Core
row under the instance's row lock, instead of the ORM ``Instance``.

Issue 16 (eighth pass): the locked ORM load cost 220-300 µs against 100-120 µs for the
same columns as a Core row, twice per step (begin and finish). A step declared
``light_row`` (the terminate; the build since the ninth pass) is begun and finished on
this row: the runner's checks, its compare-and-swap, the notifications' payload
(``compute.notifications``), the step's ``prepare`` (the build's guest,
``compute.guest``) and its final values read it; its writes go through one UPDATE
built once per set of columns (``compute.instance_state.update_columns``) and are set on
the row as a read would see them.
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, fields
from typing import Any, Final

from sqlalchemy import Select, bindparam, exists, select
from sqlalchemy.orm import Session

from compute.instance_state import in_constants, update_columns
from compute.migrations import IN_PROGRESS
from compute.notifications import LATEST_FAULT
from models import ComputeNode, Instance, Migration, PciDevice
from models.flavor import FlavorSnapshot
from models.pci_device import ALLOCATED, CLAIMED
from models.tables import table_of
from novaq.exceptions import InstanceNotFound


@dataclass(slots=True)
class InstanceRow:
    """An instance's columns as the step's transaction read them (and what it wrote)."""

    id: int
    uuid: str
    display_name: str | None
    host: str | None
    node: str | None
    vm_state: str
    task_state: str | None
    power_state: int
    image_ref: str | None
    availability_zone: str | None
    flavor: FlavorSnapshot
    system_metadata: dict[str, Any] | None
    created_at: dt.datetime | None
    launched_at: dt.datetime | None
    terminated_at: dt.datetime | None
    deleted_at: dt.datetime | None
    deleted: int
    #: Whether the instance has an unfinished move (a migration in progress): not a
    #: column, read with them, so a terminate of a server that is not moving (nearly
    #: every one) runs no statement of ``drop_moves``.
    moving: bool
    #: Whether the instance holds PCI devices (``compute.pci.held_by``), read with the
    #: row when asked for (``locked_row``'s ``with_pci``: the build's begin, whose guest
    #: names them), else None: a build of a server with none (nearly every one) runs no
    #: statement for its devices' addresses.
    holds_pci: bool | None = None
    #: Whether a node of the host ``locked_row``'s ``failed_builds_of`` names counts
    #: failed builds (``compute.build.note_build_result``'s ``failed_builds`` not 0), read
    #: when asked for (the build's finish), else None: a build's success on a host with
    #: none (nearly every one) reads no node's stats.
    host_failed_builds: bool | None = None


_INSTANCES: Final = table_of(Instance)
_MIGRATIONS: Final = table_of(Migration)
#: The row's columns (its fields but the last three, read with them), then ``moving``.
_NAMES: Final = tuple(field.name for field in fields(InstanceRow))[:-3]
_FIELDS: Final = len(_NAMES) + 1

#: ``InstanceRow.moving``: ``compute.migrations.drop_moves``'s SELECT as an EXISTS.
_MOVING = (
    exists()
    .where(
        _MIGRATIONS.c.instance_uuid == _INSTANCES.c.uuid,
        in_constants(_MIGRATIONS.c.status, IN_PROGRESS),
    )
    .correlate(_INSTANCES)
)
#: ``InstanceRow.holds_pci``: the devices ``compute.build``'s guest reads, as an EXISTS:
#: ``compute.pci.held_by``'s conditions, its statuses as constants (``in_constants``).
_PCI: Final = table_of(PciDevice)
_HOLDS_PCI = (
    exists()
    .where(
        _PCI.c.consumer_uuid == _INSTANCES.c.uuid,
        in_constants(_PCI.c.status, (CLAIMED, ALLOCATED)),
        _PCI.c.deleted == 0,
    )
    .correlate(_INSTANCES)
)


#: ``InstanceRow.host_failed_builds``: a node of the host (parameter ``host``) whose
#: stats count failed builds, as an EXISTS (a missing count is none).
_NODES: Final = table_of(ComputeNode)
_HOST_FAILED_BUILDS = exists().where(
    _NODES.c.host == bindparam("host", type_=_NODES.c.host.type),
    _NODES.c.deleted == 0,
    _NODES.c.stats["failed_builds"].as_integer() != 0,
)


@functools.cache
def _locked_statement(with_fault: bool, with_pci: bool, with_builds: bool) -> Select[Any]:
    """The row's statement of one variant, built once (building a statement cost about
    as much as running it)."""
    columns: list[Any] = [_INSTANCES.c[name] for name in _NAMES]
    columns.append(_MOVING.label("moving"))
    if with_pci:
        columns.append(_HOLDS_PCI.label("holds_pci"))
    if with_builds:
        columns.append(_HOST_FAILED_BUILDS.label("host_failed_builds"))
    if with_fault:
        # The message of the latest fault (a notification's payload carries it): the same
        # subquery the ORM path reads, correlated to the same table.
        columns.append(LATEST_FAULT.label("latest_fault"))
    return (
        select(*columns)
        .where(_INSTANCES.c.uuid == bindparam("uuid", type_=_INSTANCES.c.uuid.type))
        .with_for_update(of=_INSTANCES)
    )


def locked_row(
    session: Session,
    instance_uuid: str,
    with_fault: bool = False,
    with_pci: bool = False,
    failed_builds_of: str | None = None,
) -> tuple[InstanceRow, str | None]:
    """The instance's row, locked until the transaction ends (SQLite: BEGIN IMMEDIATE),
    and with ``with_fault`` the message of its latest fault (else None); with
    ``with_pci`` its ``holds_pci`` is read too, with ``failed_builds_of`` (a host) its
    ``host_failed_builds``. On the session's connection: no ORM object is loaded, so the
    ORM's pending writes are flushed first, as an ORM statement's autoflush would have."""
    session.flush()
    with_builds = failed_builds_of is not None
    statement = _locked_statement(with_fault, with_pci, with_builds)
    params = {"uuid": instance_uuid}
    if failed_builds_of is not None:
        params["host"] = failed_builds_of
    row = session.connection().execute(statement, params).first()
    if row is None:
        raise InstanceNotFound(uuid=instance_uuid)
    fault = row[-1] if with_fault else None
    instance = InstanceRow(*row[:_FIELDS])
    extra = _FIELDS
    if with_pci:
        instance.holds_pci = bool(row[extra])
        extra += 1
    if with_builds:
        instance.host_failed_builds = bool(row[extra])
    return instance, fault


def write_row(session: Session, row: InstanceRow, values: dict[str, Any]) -> None:
    """Write ``values`` to the locked row's instance with one UPDATE (built once per set
    of columns) and set them on ``row``, as a read would now see them."""
    update_columns(session, row.id, values)
    set_row(row, values)


def set_row(row: InstanceRow, values: dict[str, Any]) -> None:
    """Set ``values`` on ``row`` (those of its columns; others are not the row's)."""
    for key, value in values.items():
        if key in _NAMES:
            setattr(row, key, value)
