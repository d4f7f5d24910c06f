"""The public API for moves: resize, confirm and revert, cold migrate, and migrations."""

from __future__ import annotations

import uuid as uuid_module
from typing import Any

from sqlalchemy import select
from typing_extensions import TypedDict, Unpack

from compute import instance_actions as actions
from compute.instance_state import cas_update, get_instance
from compute.moves import active_migration
from compute.pci import requests_from_extra_specs
from compute.states import TaskState, VmState
from models import Instance, Migration, utcnow
from models.db import session_scope
from models.flavor import FlavorSnapshot
from models.migration import MigrationType
from models.migration_context import MigrationContext
from models.states import MigrationStatus
from novaq.exceptions import InstanceInvalidState, InvalidInput, NotFound, ResizeError
from workflows import dispatch
from workflows.api import common, flavors, submit
from workflows.api.submit import MigrationWritten, Written
from workflows.api.validation import Name, Printable, validated
from workflows.gate import check_instance_state
from workflows.moves import confirm_workflow, revert_workflow, select_workflow

__all__ = ["confirm_resize", "list_migrations", "migrate", "resize", "revert_resize"]


def _refuse(instance: Instance, action: str) -> InstanceInvalidState:
    return InstanceInvalidState(
        action=action,
        uuid=instance.uuid,
        vm_state=instance.vm_state,
        task_state=instance.task_state,
    )


def _check_movable(session: Any, instance: Instance, action: str) -> None:
    """Nova's resize/migrate gate: ACTIVE or SHUTOFF, no task, on an up host."""
    check_instance_state(instance, action)
    if instance.host is None or not common.host_is_up(session, instance.host, common.settings()):
        raise InvalidInput(reason=f"the compute service of {instance.host} is down or unknown")


def _check_no_shrink(old: FlavorSnapshot, new: FlavorSnapshot) -> None:
    """Nova's driver refuses to shrink a disk; refused here before anything is written."""
    if new.root_gb < old.root_gb or new.ephemeral_gb < old.ephemeral_gb:
        raise ResizeError(reason="Unable to resize disk down.")


@validated()
def resize(uuid: str, flavor: Name) -> str:
    """Resize a server to another flavor; returns the action's request id. The server goes
    RESIZE, then VERIFY_RESIZE, waiting for confirm or revert."""
    return _move(uuid, flavor_ref=flavor, host=None)


@validated()
def migrate(uuid: str, host: Name | None = None) -> str:
    """Cold-migrate a server (same flavor, another host; optionally the one named)."""
    if host is not None:
        flavors.check_name(host, "host")
    return _move(uuid, flavor_ref=None, host=host)


def _move(uuid: str, flavor_ref: str | None, host: str | None) -> str:
    uuid = common.check_uuid(uuid)
    action = "resize" if flavor_ref is not None else "migrate"
    with session_scope(common.db_url(), read_only=True) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        _check_movable(session, instance, action)
        if flavor_ref is not None:
            new_flavor = FlavorSnapshot.from_row(flavors.get_flavor(session, flavor_ref))
            if new_flavor.flavorid == instance.flavor.flavorid:
                raise InvalidInput(reason="cannot resize a server to the flavor it has")
            _check_no_shrink(instance.flavor, new_flavor)
        else:
            new_flavor = instance.flavor
        if host is not None and host == instance.host:
            raise InvalidInput(reason=f"the server is already on {host}")
        if host is not None:
            common.check_compute_host(session, host)
    new_pci = [
        r.to_dict() for r in requests_from_extra_specs(new_flavor.extra_specs, common.settings())
    ]
    dispatch.check_broker()
    request_id = common.new_request_id()
    migration_uuid = str(uuid_module.uuid4())
    with session_scope(common.db_url()) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        written = Written(
            request_id,
            (uuid,),
            TaskState.RESIZE_PREP,
            submit.columns(instance, "task_state", "system_metadata"),
            migration=MigrationWritten(migration_uuid, MigrationStatus.PRE_MIGRATING),
        )
        cas_update(
            session,
            uuid,
            expected_task_state=[None],
            expected_vm_state=[VmState.ACTIVE, VmState.STOPPED],
            task_state=TaskState.RESIZE_PREP,
        )
        instance.old_vm_state = instance.vm_state
        session.add(
            Migration(
                uuid=migration_uuid,
                instance_uuid=uuid,
                migration_type=MigrationType.RESIZE
                if flavor_ref is not None
                else MigrationType.MIGRATION,
                status=MigrationStatus.PRE_MIGRATING,
                source_compute=instance.host,
                source_node=instance.node,
                old_flavor=instance.flavor,
                new_flavor=new_flavor,
                request_id=request_id,
                context=MigrationContext(
                    request_spec=dict(instance.request_spec or {}, instance_uuid=uuid),
                    old_pci_requests=tuple((instance.request_spec or {}).get("pci_requests", [])),
                    new_pci_requests=tuple(new_pci),
                    requested_host=host,
                ),
            )
        )
        actions.start_action(session, uuid, action, request_id)
    submit.publish(select_workflow(migration_uuid, uuid, request_id), written)
    return request_id


@validated()
def confirm_resize(uuid: str) -> str:
    """Confirm a resize or migration (VERIFY_RESIZE → ACTIVE, or SHUTOFF)."""
    return _finish_move(uuid, "confirmResize")


@validated()
def revert_resize(uuid: str) -> str:
    """Revert a resize or migration: back to the source host, old flavor and devices."""
    return _finish_move(uuid, "revertResize")


def _finish_move(uuid: str, action: str) -> str:
    uuid = common.check_uuid(uuid)
    gate = "confirm_resize" if action == "confirmResize" else "revert_resize"
    with session_scope(common.db_url(), read_only=True) as session:
        instance = get_instance(session, uuid, with_deleted=False)
        check_instance_state(instance, gate)
        migration = active_migration(session, uuid)
        if migration is None or migration.status != MigrationStatus.FINISHED:
            raise NotFound(f"No migration of instance {uuid} is waiting for confirm or revert.")
    dispatch.check_broker()
    request_id = common.new_request_id()
    with session_scope(common.db_url()) as session:
        migration = active_migration(session, uuid)
        assert migration is not None
        instance = get_instance(session, uuid, with_deleted=False)
        written = Written(
            request_id,
            (uuid,),
            None if action == "confirmResize" else TaskState.RESIZE_REVERTING,
            submit.columns(instance, "task_state"),
            migration=MigrationWritten(
                migration.uuid,
                MigrationStatus.CONFIRMING
                if action == "confirmResize"
                else MigrationStatus.REVERTING,
                submit.columns(migration, "status", "request_id"),
            ),
        )
        if action == "confirmResize":
            cas_update(
                session, uuid, expected_task_state=[None], expected_vm_state=[VmState.RESIZED]
            )
            migration.status = MigrationStatus.CONFIRMING
            workflow = confirm_workflow(
                migration.uuid, uuid, request_id, migration.source_compute or ""
            )
        else:
            cas_update(
                session,
                uuid,
                expected_task_state=[None],
                expected_vm_state=[VmState.RESIZED],
                task_state=TaskState.RESIZE_REVERTING,
            )
            migration.status = MigrationStatus.REVERTING
            workflow = revert_workflow(
                migration.uuid,
                uuid,
                request_id,
                migration.source_compute or "",
                migration.dest_compute or "",
            )
        migration.request_id, migration.updated_at = request_id, utcnow()
        actions.start_action(session, uuid, action, request_id)
    submit.publish(workflow, written)
    return request_id


def migration_dict(migration: Migration) -> dict[str, Any]:
    return {
        "uuid": migration.uuid,
        "instance_uuid": migration.instance_uuid,
        "migration_type": migration.migration_type,
        "status": migration.status,
        "source_compute": migration.source_compute,
        "source_node": migration.source_node,
        "dest_compute": migration.dest_compute,
        "dest_node": migration.dest_node,
        "old_flavor": migration.old_flavor.name if migration.old_flavor else None,
        "new_flavor": migration.new_flavor.name if migration.new_flavor else None,
        "old_pci_devices": list(migration.context.old_pci_devices),
        "new_pci_devices": list(migration.context.new_pci_devices),
        "created_at": migration.created_at.isoformat(),
        "updated_at": migration.updated_at.isoformat() if migration.updated_at else None,
    }


class MigrationFilters(TypedDict, total=False):
    instance_uuid: str
    status: str
    migration_type: str
    host: Printable | None


@validated(extra="filter")
def list_migrations(**filters: Unpack[MigrationFilters]) -> list[dict[str, Any]]:
    """Migrations, oldest first. Filters: instance_uuid (a server's uuid or name),
    status, migration_type, host."""
    if "instance_uuid" in filters:
        filters["instance_uuid"] = common.check_uuid(filters["instance_uuid"])
    query = select(Migration).order_by(Migration.id)
    for key in ("instance_uuid", "status", "migration_type"):
        if key in filters:
            query = query.where(getattr(Migration, key) == filters[key])
    if "host" in filters:
        host = filters["host"]
        query = query.where((Migration.source_compute == host) | (Migration.dest_compute == host))
    with session_scope(common.db_url(), read_only=True) as session:
        return [migration_dict(m) for m in session.scalars(query)]
