"""``migrations``: a resize or cold migration of an instance, Nova's record of a move.

During a move the migration's uuid is the allocation consumer that holds the source
node (old flavor) while the instance's uuid holds the destination (new flavor).

Every write of ``status`` is checked against ``models.states.MIGRATION_TRANSITIONS``:
attribute writes by the validator below, bulk ``UPDATE``s by ``status_update`` (and the
session hook at the end of this module refuses a bulk update that bypasses it).
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any, NamedTuple

from sqlalchemy import Index, String, Update, event, update
from sqlalchemy.orm import Mapped, ORMExecuteState, Session, mapped_column, validates

from models.base import Base, intpk, timestamp, uuid36
from models.enum_types import StrEnumType
from models.flavor import FlavorSnapshot, FlavorSnapshotType
from models.migration_context import MigrationContext, MigrationContextType
from models.states import MigrationStatus, check_migration_transition
from novaq.exceptions import InvalidMigrationTransition

#: The execution option ``status_update`` sets: the transition was checked.
CHECKED_OPTION = "novaq_migration_transition_checked"


class MigrationType(StrEnum):
    """Nova's ``fields.MigrationType``: ``resize`` iff the flavor changes."""

    MIGRATION = "migration"
    RESIZE = "resize"
    LIVE_MIGRATION = "live-migration"
    EVACUATION = "evacuation"


class MoveFlavors(NamedTuple):
    """The flavors of a move: the instance's before (held on the source) and after."""

    old: FlavorSnapshot
    new: FlavorSnapshot


class Migration(Base):
    __tablename__ = "migrations"
    __table_args__ = (
        Index("ix_migrations_source", "source_compute", "source_node", "status"),
        Index("ix_migrations_dest", "dest_compute", "dest_node", "status"),
    )

    id: Mapped[intpk]
    uuid: Mapped[uuid36] = mapped_column(unique=True)
    instance_uuid: Mapped[uuid36] = mapped_column(index=True)
    migration_type: Mapped[MigrationType] = mapped_column(StrEnumType(MigrationType, 32))
    status: Mapped[MigrationStatus] = mapped_column(StrEnumType(MigrationStatus, 32))
    source_compute: Mapped[str | None] = mapped_column(String(255))
    source_node: Mapped[str | None] = mapped_column(String(255))
    dest_compute: Mapped[str | None] = mapped_column(String(255))
    dest_node: Mapped[str | None] = mapped_column(String(255))
    # None (``{}`` in the table) only for a migration created without them.
    old_flavor: Mapped[FlavorSnapshot | None] = mapped_column(
        FlavorSnapshotType, nullable=False, default=dict
    )
    new_flavor: Mapped[FlavorSnapshot | None] = mapped_column(
        FlavorSnapshotType, nullable=False, default=dict
    )
    # What the move holds while in flight (Nova's MigrationContext).
    context: Mapped[MigrationContext] = mapped_column(
        MigrationContextType, default=MigrationContext
    )
    request_id: Mapped[str | None] = mapped_column(String(255))
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)

    @validates("status")
    def _check_status(self, key: str, wanted: str) -> MigrationStatus:
        return check_migration_transition(self.status, wanted, self.uuid)

    @validates("migration_type")
    def _type(self, key: str, value: str) -> MigrationType:
        return MigrationType(value)

    @validates("old_flavor", "new_flavor")
    def _flavor(
        self, key: str, value: FlavorSnapshot | dict[str, Any] | None
    ) -> FlavorSnapshot | None:
        return FlavorSnapshot.load_optional(value)

    @property
    def flavors(self) -> MoveFlavors:
        """The old and the new flavor of the move (every move is created with both)."""
        if self.old_flavor is None or self.new_flavor is None:
            raise ValueError(f"migration {self.uuid} has no flavors")
        return MoveFlavors(self.old_flavor, self.new_flavor)

    @validates("context")
    def _context(self, key: str, value: MigrationContext | dict[str, Any]) -> MigrationContext:
        return MigrationContext.load(value)

    def __repr__(self) -> str:
        return f"<Migration {self.uuid} {self.migration_type} {self.status}>"


def status_update(
    migration_uuid: str, current: MigrationStatus, wanted: MigrationStatus, **values: Any
) -> Update:
    """The bulk ``UPDATE`` of one migration from ``current`` to ``wanted`` (a
    compare-and-swap: no row changes if it moved on), refused here if the table does not
    allow it."""
    check_migration_transition(current, wanted, migration_uuid)
    return (
        update(Migration)
        .where(Migration.uuid == migration_uuid, Migration.status == current)
        .values(status=wanted, **values)
        .execution_options(**{CHECKED_OPTION: True})
    )


@event.listens_for(Session, "do_orm_execute")
def _refuse_unchecked_status_update(state: ORMExecuteState) -> None:
    """A bulk UPDATE that writes ``migrations.status`` must come from ``status_update``
    (which checked the transition); any other is refused before it reaches the table."""
    if not state.is_update or not isinstance(state.statement, Update):
        return
    if state.bind_mapper is None or state.bind_mapper.class_ is not Migration:
        return
    if state.execution_options.get(CHECKED_OPTION):
        return
    if _sets_status(state.statement, state.parameters):
        raise InvalidMigrationTransition(
            "migrations.status may only be bulk-updated through models.migration.status_update"
        )


def _sets_status(statement: Update, parameters: Any) -> bool:
    # NOTE: SQLAlchemy has no public accessor for an UPDATE's SET clause; _values holds
    # .values(...) keyed by column or name, parameters the executemany form.
    keys = {getattr(key, "key", key) for key in (statement._values or {})}
    rows = parameters if isinstance(parameters, list) else [parameters or {}]
    return "status" in keys or any("status" in row for row in rows)
