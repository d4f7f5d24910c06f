"""Resize and cold migration on the hosts (Nova's prep_resize → resize_instance →
finish_resize, then confirm_resize or revert_resize → finish_revert_resize), and the one
undo of a move that failed.

Allocations are kept as placement keeps them: while a move is in flight the migration
holds the source (old flavor and old PCI devices) and the instance holds the destination
(new flavor and new devices); confirm frees the source, revert frees the destination and
gives the source back to the instance.

The disks move as in Nova's libvirt driver: prep_resize records where the destination
keeps instance directories (``dest_instances_path`` in the migration's context);
resize_instance refuses a shrink (the move rolled back, the server as it was, with a
fault), takes the guest down and has the driver keep the originals aside
(``<uuid>_resize``) and copy the disks there; finish_resize grows them and starts the
guest; confirm removes the originals, revert removes the destination's copy and
finish_revert_resize puts the originals back and starts the guest on them.

Every step moves task_state with a compare-and-swap that also accepts its own in-flight
state, so a step redelivered after its worker died resumes instead of sticking.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.claims import confirm_move_in_session, retry_on_conflict
from compute.guest import guest_spec as build_guest_spec
from compute.instance_state import cas_update, get_instance
from compute.migrations import (
    IN_PROGRESS,
    UNCONFIRMED,
    MigrationNotFound,
    active_migration,
    drop_moves,
    get_migration,
    give_back_source,
    new_request,
    node_id,
    pci_requests,
    pop_old_vm_state,
    set_migration,
    take_flavor,
)
from compute.move_failures import abort_move, fail_scheduling, reschedule_move
from compute.pci import held_devices
from compute.power import instance_power_off_timeout
from compute.states import TaskState, VmState
from compute.steps import StepContext
from models import Instance
from novaq.exceptions import InstanceNotFound, ResizeError, UnexpectedTaskStateError
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec, check_can_resize

#: Re-exported: the move's records and undo were defined here before the split.
__all__ = [
    "IN_PROGRESS",
    "UNCONFIRMED",
    "MigrationNotFound",
    "abort_move",
    "active_migration",
    "drop_moves",
    "fail_scheduling",
    "get_migration",
    "new_request",
    "pci_requests",
    "reschedule_move",
]

LOG = logging.getLogger(__name__)


def guest_spec(
    session: Session, instance: Instance, flavor: dict[str, Any], addresses: list[str]
) -> GuestSpec:
    return build_guest_spec(session, instance, tuple(addresses), flavor)


@dataclass(frozen=True, slots=True)
class MoveContext(StepContext):
    """A move step's context: a host step's (transactions, driver, host, request,
    ``shutdown_timeout``) and the migration it works on."""

    migration_uuid: str = ""


@contextmanager
def step(ctx: MoveContext, event: str) -> Iterator[str]:
    """One move step recorded as an action event; yields the instance uuid."""
    with ctx.sessions() as session:
        instance_uuid = get_migration(session, ctx.migration_uuid).instance_uuid
    with actions.event_reporter(ctx.sessions, instance_uuid, ctx.request_id, event, ctx.host):
        yield instance_uuid


def prep_resize(ctx: MoveContext) -> None:
    """On the destination: check the claim the scheduler made is here, and record what the
    move holds (Nova's MigrationContext: the old and new PCI devices)."""
    with step(ctx, "compute_prep_resize") as instance_uuid:
        ctx.driver.get_available_resource()  # the destination's hypervisor answers
        with ctx.sessions() as session:
            migration = get_migration(session, ctx.migration_uuid)
            cas_update(session, instance_uuid, expected_task_state=[TaskState.RESIZE_PREP])
            dest = node_id(session, migration.dest_compute, migration.dest_node)
            source = node_id(session, migration.source_compute, migration.source_node)
            context = dict(migration.context)
            context["new_pci_devices"] = [
                d.address for d in held_devices(session, instance_uuid, dest)
            ]
            context["old_pci_devices"] = [
                d.address for d in held_devices(session, migration.uuid, source)
            ]
            # NOTE: the source copies the disks here (a local path on one machine).
            context["dest_instances_path"] = str(ctx.driver.instances_path)
            migration.context = context
            instance = get_instance(session, instance_uuid)
            sysmeta = dict(instance.system_metadata or {})
            sysmeta.setdefault("old_vm_state", instance.vm_state)
            instance.system_metadata = sysmeta


def resize_instance(ctx: MoveContext) -> None:
    """On the source: take the guest down and copy its disks to the destination (the
    originals kept until confirm or revert), then point the instance at the destination.
    A shrink is refused before anything moves and rolls the move back."""
    with step(ctx, "compute_resize_instance") as instance_uuid:
        with ctx.sessions() as session:
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_PREP, TaskState.RESIZE_MIGRATING],
                task_state=TaskState.RESIZE_MIGRATING,
            )
            migration = set_migration(session, ctx.migration_uuid, "migrating")
            instance = get_instance(session, instance_uuid)
            old = guest_spec(session, instance, migration.old_flavor, [])
            new = guest_spec(session, instance, migration.new_flavor, [])
            dest_path = migration.context.get("dest_instances_path")
        # NOTE: without a recorded destination path the instances path is shared (Nova's
        # shared storage): the destination's directory is this host's.
        dest = dest_path or str(ctx.driver.instances_path)
        try:
            # Nova refuses a shrink before it touches the guest, so check before the power-off.
            check_can_resize(old, new)
            _power_off_cleanly(ctx, instance_uuid)
            ctx.driver.migrate_disk_and_power_off(old, new, dest)
        except ResizeError as exc:
            _roll_back(ctx, instance_uuid, exc)
            raise
        with ctx.sessions() as session:
            migration = get_migration(session, ctx.migration_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_MIGRATING],
                task_state=TaskState.RESIZE_MIGRATED,
                host=migration.dest_compute,
                node=migration.dest_node,
            )
            set_migration(session, ctx.migration_uuid, "post-migrating")


def _power_off_cleanly(ctx: MoveContext, instance_uuid: str) -> None:
    """Nova's ``migrate_disk_and_power_off`` starts with a clean power-off (the image's
    ``os_shutdown_timeout`` or ``shutdown_timeout``), so the guest's disks are quiet."""
    if ctx.driver.instance_exists(instance_uuid):
        with ctx.sessions() as session:
            timeout = instance_power_off_timeout(session, instance_uuid, ctx.shutdown_timeout_s)
        ctx.driver.power_off(instance_uuid, timeout)


def finish_resize(ctx: MoveContext) -> None:
    """On the destination: the instance takes the new flavor and its guest starts with
    exactly the devices the new flavor asks for; a stopped server stays stopped."""
    with step(ctx, "compute_finish_resize") as instance_uuid:
        with ctx.sessions() as session:
            migration = get_migration(session, ctx.migration_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_MIGRATED, TaskState.RESIZE_FINISH],
                task_state=TaskState.RESIZE_FINISH,
            )
            instance = get_instance(session, instance_uuid)
            take_flavor(instance, migration.new_flavor, migration.context.get("new_pci_requests"))
            dest = node_id(session, migration.dest_compute, migration.dest_node)
            addresses = [d.address for d in held_devices(session, instance_uuid, dest)]
            spec = guest_spec(session, instance, migration.new_flavor, addresses)
            stopped = instance.system_metadata.get("old_vm_state") == VmState.STOPPED
        info = ctx.driver.finish_migration(spec, power_on=not stopped)
        with _or_take_down(ctx.driver, instance_uuid), ctx.sessions() as session:
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_FINISH],
                vm_state=VmState.RESIZED,
                task_state=None,
                power_state=info.power_state,
            )
            set_migration(session, ctx.migration_uuid, "finished")


def _roll_back(ctx: MoveContext, instance_uuid: str, exc: BaseException) -> None:
    """Nova's ``InstanceFaultRollback`` of a refused resize: the accounting back on the
    source, the server as it was (task cleared) with the fault, the migration in error."""

    def work(session: Session) -> None:
        migration = get_migration(session, ctx.migration_uuid)
        if migration.status not in IN_PROGRESS:
            return
        give_back_source(session, migration)
        instance = get_instance(session, instance_uuid)
        instance.task_state = None
        pop_old_vm_state(instance)
        actions.add_fault(session, instance_uuid, exc, ctx.host)
        set_migration(session, ctx.migration_uuid, "error")

    retry_on_conflict(ctx.sessions, work)
    LOG.warning("Migration %s rolled back on %s: %s", ctx.migration_uuid, ctx.host, exc)


@contextmanager
def _or_take_down(driver: ComputeDriver, instance_uuid: str) -> Iterator[None]:
    """If the server was deleted while its guest was starting, take the guest down again
    so nothing runs for a server that no longer exists (as a build does)."""
    try:
        yield
    except (UnexpectedTaskStateError, InstanceNotFound):
        LOG.info("Instance %s was deleted during a move; destroying its new guest", instance_uuid)
        driver.destroy(instance_uuid)
        raise


def confirm_resize(ctx: MoveContext) -> None:
    """On the source: drop what the migration holds there; the server settles as ACTIVE,
    or SHUTOFF if its guest is off (Nova)."""
    with step(ctx, "compute_confirm_resize") as instance_uuid:
        # The source guest went down in resize_instance: its kept files and the
        # accounting are left here. Files first, as Nova's confirm_migration, so the
        # server is ACTIVE only once they are gone.
        _drop_originals(ctx, instance_uuid)

        def work(session: Session) -> None:
            migration = get_migration(session, ctx.migration_uuid)
            if migration.status == "confirmed":
                return
            source = node_id(session, migration.source_compute, migration.source_node)
            confirm_move_in_session(session, migration.uuid, source)
            instance = get_instance(session, instance_uuid)
            vm_state = (
                VmState.STOPPED if instance.power_state == power_state.SHUTDOWN else VmState.ACTIVE
            )
            cas_update(
                session,
                instance_uuid,
                expected_vm_state=[VmState.RESIZED],
                expected_task_state=[None],
                vm_state=vm_state,
            )
            pop_old_vm_state(instance)
            set_migration(session, ctx.migration_uuid, "confirmed")

        retry_on_conflict(ctx.sessions, work)


def revert_resize(ctx: MoveContext) -> None:
    """On the destination: take the new guest down, free the destination and give the
    source back to the instance, in one transaction (so no audit ever sees a gap)."""
    with step(ctx, "compute_revert_resize") as instance_uuid:
        # As Nova's destroy on the destination: guest and (unless shared) files first.
        ctx.driver.destroy(instance_uuid)
        _drop_files_unless_same_host(ctx, instance_uuid)

        def work(session: Session) -> None:
            migration = get_migration(session, ctx.migration_uuid)
            if migration.status == "reverted":
                return
            give_back_source(session, migration)
            instance = get_instance(session, instance_uuid)
            instance.host, instance.node = migration.source_compute, migration.source_node
            set_migration(session, ctx.migration_uuid, "reverted")

        retry_on_conflict(ctx.sessions, work)


def _drop_originals(ctx: MoveContext, instance_uuid: str) -> None:
    ctx.driver.confirm_migration(instance_uuid)
    _drop_files_unless_same_host(ctx, instance_uuid)


def _drop_files_unless_same_host(ctx: MoveContext, instance_uuid: str) -> None:
    """Nova's ``_cleanup_resize`` / revert cleanup: the side the server left keeps no
    instance directory (a same-host resize shares it, so it stays)."""
    with ctx.sessions() as session:
        migration = get_migration(session, ctx.migration_uuid)
        same_host = migration.source_compute == migration.dest_compute
    if not same_host:
        ctx.driver.delete_instance_files(instance_uuid)


def finish_revert_resize(ctx: MoveContext) -> None:
    """On the source: start the guest again on its original disks, with its old flavor
    and old devices."""
    with step(ctx, "compute_finish_revert_resize") as instance_uuid:
        with ctx.sessions() as session:
            migration = get_migration(session, ctx.migration_uuid)
            instance = get_instance(session, instance_uuid)
            source = node_id(session, migration.source_compute, migration.source_node)
            addresses = [d.address for d in held_devices(session, instance_uuid, source)]
            spec = guest_spec(session, instance, migration.old_flavor, addresses)
            stopped = instance.system_metadata.get("old_vm_state") == VmState.STOPPED
        info = ctx.driver.finish_revert_migration(spec, power_on=not stopped)
        with _or_take_down(ctx.driver, instance_uuid), ctx.sessions() as session:
            instance = get_instance(session, instance_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_REVERTING],
                vm_state=VmState.STOPPED if stopped else VmState.ACTIVE,
                task_state=None,
                power_state=info.power_state,
            )
            pop_old_vm_state(instance)
