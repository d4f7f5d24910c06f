"""What a move holds while in flight (Nova's MigrationContext), stored in
``migrations.context``: the boot request it reschedules from, the PCI requests and devices
of both ends, and where the destination keeps instance directories.

One frozen model, one (de)serialiser: ``MigrationContextType`` turns the JSON column into a
``MigrationContext`` on read and back on write, so no code reads the dict by key.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import JSON
from sqlalchemy.types import TypeDecorator


class MigrationContext(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The instance's boot request (``RequestSpec.to_dict()``), the base of the move's.
    request_spec: dict[str, Any] = {}
    #: ``PciRequest.to_dict()`` of the old and the new flavor.
    old_pci_requests: tuple[dict[str, Any], ...] = ()
    new_pci_requests: tuple[dict[str, Any], ...] = ()
    #: The host the user asked for (``migrate --host``), if any.
    requested_host: str | None = None
    #: PCI addresses held on the source (by the migration) and the destination (by the
    #: instance), recorded by prep_resize.
    old_pci_devices: tuple[str, ...] = ()
    new_pci_devices: tuple[str, ...] = ()
    #: Where the destination keeps instance directories (None: shared with the source).
    dest_instances_path: str | None = None

    @classmethod
    def load(cls, data: MigrationContext | dict[str, Any] | None) -> MigrationContext:
        """The one deserialiser (an empty or missing context is the default one)."""
        if isinstance(data, MigrationContext):
            return data
        return cls.model_validate(data or {})

    def dump(self) -> dict[str, Any]:
        """The one serialiser: JSON-ready, unset fields left out as before."""
        return self.model_dump(mode="json", exclude_defaults=True)


class MigrationContextType(TypeDecorator[MigrationContext]):
    """``migrations.context``: JSON in the table, a MigrationContext in Python."""

    impl = JSON
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Any) -> dict[str, Any] | None:
        return None if value is None else MigrationContext.load(value).dump()

    def process_result_value(self, value: Any, dialect: Any) -> MigrationContext:
        return MigrationContext.load(value)
