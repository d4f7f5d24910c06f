"""``instances``: a server. Two state axes as in Nova: ``vm_state`` (stable) and
``task_state`` (in flight); ``power_state`` is the hypervisor's last known view.

``instance_metadata``: the server's user metadata (Nova's ``instance_metadata``: what
``--property`` at boot and ``meta set`` write), one row per key, apart from the
``system_metadata`` novaq itself keeps."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship, validates

from models.base import Base, intpk, str255, timestamp, uuid36
from models.enum_types import IntEnumType, StrEnumType
from models.flavor import FlavorSnapshot, FlavorSnapshotType
from models.states import PowerState, TaskState, VmState

#: The ``system_metadata`` key of the vm_state an operation will return to (Nova's
#: ``old_vm_state``: a resize's confirm/revert, a suspend's resume).
OLD_VM_STATE = "old_vm_state"

#: The project and user a server belongs to when the boot names none (and what the
#: servers created before they were recorded got): Nova's devstack ``demo`` project.
DEFAULT_PROJECT_ID = "demo"
DEFAULT_USER_ID = "demo"


class Instance(Base):
    __tablename__ = "instances"
    __table_args__ = (
        # The scheduler's per-host counts of live and in-flight instances read only this
        # index (no table row); its (host, deleted) prefix serves every by-host lookup.
        Index(
            "ix_instances_host_deleted_vm_state_task_state",
            "host",
            "deleted",
            "vm_state",
            "task_state",
        ),
        Index("ix_instances_host_deleted_cleaned", "host", "deleted", "cleaned"),
    )

    id: Mapped[intpk]
    uuid: Mapped[uuid36] = mapped_column(unique=True)
    display_name: Mapped[str255]
    # Nova's server description (API 2.19): free text, at most 255 characters, or none.
    description: Mapped[str | None] = mapped_column(String(255))
    flavor_id: Mapped[int] = mapped_column(ForeignKey("flavors.id"))
    # A snapshot of the flavor at boot (with extra_specs), as Nova's instance_extra.flavor.
    flavor: Mapped[FlavorSnapshot] = mapped_column(FlavorSnapshotType)
    image_ref: Mapped[str] = mapped_column(String(255), default="")
    # Who owns the server (Nova's project_id/user_id: the API's tenant_id/user_id).
    project_id: Mapped[str] = mapped_column(
        String(255), default=DEFAULT_PROJECT_ID, server_default=DEFAULT_PROJECT_ID
    )
    user_id: Mapped[str] = mapped_column(
        String(255), default=DEFAULT_USER_ID, server_default=DEFAULT_USER_ID
    )
    # The image's ``os_type`` property at boot or rebuild, as given (Nova's os_type).
    os_type: Mapped[str | None] = mapped_column(String(255))
    vcpus: Mapped[int] = mapped_column(default=0)
    memory_mb: Mapped[int] = mapped_column(default=0)
    root_gb: Mapped[int] = mapped_column(default=0)
    ephemeral_gb: Mapped[int] = mapped_column(default=0)
    vm_state: Mapped[VmState] = mapped_column(StrEnumType(VmState, 255))
    task_state: Mapped[TaskState | None] = mapped_column(StrEnumType(TaskState, 255))
    power_state: Mapped[PowerState] = mapped_column(
        IntEnumType(PowerState), default=PowerState.NOSTATE
    )
    host: Mapped[str | None] = mapped_column(String(255))
    node: Mapped[str | None] = mapped_column(String(255))
    availability_zone: Mapped[str | None] = mapped_column(String(255))
    launched_at: Mapped[dt.datetime | None]
    terminated_at: Mapped[dt.datetime | None]
    # The boot request as the scheduler needs it (hints, group, count index).
    request_spec: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    system_metadata: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[timestamp]
    updated_at: Mapped[dt.datetime | None]
    deleted_at: Mapped[dt.datetime | None]
    deleted: Mapped[int] = mapped_column(default=0)
    # Nova's ``cleaned``: the host's files of a deleted instance are gone
    # (``_run_pending_deletes`` retries until they are).
    cleaned: Mapped[int] = mapped_column(default=0, server_default="0")
    # Loaded only when read (the views): the many queries that move states never need it.
    metadata_items: Mapped[list[InstanceMetadata]] = relationship(
        cascade="all, delete-orphan", order_by="InstanceMetadata.key"
    )

    @property
    def metadata_dict(self) -> dict[str, str]:
        """The user metadata as Nova's API shows it."""
        return {m.key: m.value for m in self.metadata_items}

    @validates("flavor")
    def _flavor(self, key: str, value: FlavorSnapshot | dict[str, Any]) -> FlavorSnapshot:
        return FlavorSnapshot.load(value)

    @validates("vm_state")
    def _vm_state(self, key: str, value: str) -> VmState:
        return VmState(value)

    @validates("task_state")
    def _task_state(self, key: str, value: str | None) -> TaskState | None:
        return None if value is None else TaskState(value)

    @validates("power_state")
    def _power_state(self, key: str, value: int) -> PowerState:
        return PowerState(value)

    @property
    def old_vm_state(self) -> VmState | None:
        """The vm_state stashed in ``system_metadata`` to return to, if any."""
        stashed = (self.system_metadata or {}).get(OLD_VM_STATE)
        return None if stashed is None else VmState(stashed)

    @old_vm_state.setter
    def old_vm_state(self, value: VmState | None) -> None:
        # A new dict: the JSON column only notices a reassignment.
        meta = {k: v for k, v in (self.system_metadata or {}).items() if k != OLD_VM_STATE}
        if value is not None:
            meta[OLD_VM_STATE] = str(VmState(value))
        self.system_metadata = meta

    def __repr__(self) -> str:
        return f"<Instance {self.uuid} {self.vm_state}/{self.task_state} on {self.host}>"


class InstanceMetadata(Base):
    __tablename__ = "instance_metadata"
    __table_args__ = (UniqueConstraint("instance_uuid", "key"),)

    id: Mapped[intpk]
    instance_uuid: Mapped[uuid36] = mapped_column(ForeignKey("instances.uuid", ondelete="CASCADE"))
    key: Mapped[str255]
    value: Mapped[str255]
