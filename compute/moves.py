"""Resize and cold migration on the hosts (Nova's prep_resize → resize_instance →
finish_resize, then confirm_resize or revert_resize → finish_revert_resize), and the one
undo of a move that failed.

Allocations are kept as placement keeps them: while a move is in flight the migration
holds the source (old flavor and old PCI devices) and the instance holds the destination
(new flavor and new devices); confirm frees the source, revert frees the destination and
gives the source back to the instance.

The disks move as in Nova's libvirt driver, but pulled rather than pushed:
resize_instance refuses a shrink (the move rolled back, the server as it was, with a
fault), takes the guest down and has the driver keep the originals aside
(``<uuid>_resize``), which the source's disk endpoint serves (``compute.transfer``);
finish_resize has the destination's driver pull them from the endpoint the source's
services row names at that moment, grow them and start the guest; confirm removes the
originals, revert removes the destination's copy and finish_revert_resize puts the
originals back and starts the guest on them. A same-host resize, or a source that
publishes no endpoint (no ``[transfer] secret``: one machine), copies the disks locally
instead, into the destination's instances path that prep_resize records
(``dest_instances_path`` in the migration's context).

Every step is a ``Step`` run by ``compute.steps.run_step`` (``compute.move_step`` gives
them their shape) and moves task_state with a compare-and-swap that also accepts its own
in-flight state, so a step redelivered after its worker died resumes instead of sticking.
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.claims import confirm_move, retry_on_conflict
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
from compute.move_step import (
    MoveContext,
    drop_files_unless_same_host,
    guest_spec,
    migration_of,
    move_step,
    run_move,
    take_down_guest,
)
from compute.pci import held_devices
from compute.power import instance_power_off_timeout
from compute.servicegroup import disk_endpoint_of
from compute.states import TaskState, VmState
from compute.steps import StepContext, StepRun, close_event
from compute.transfer import warn_local_copies
from models import Instance, Migration
from models.states import MigrationStatus
from novaq.exceptions import ResizeError
from virt import power_state
from virt.driver import check_can_resize

#: Re-exported: the move's records and undo were defined here before the split.
__all__ = [
    "MoveContext",
    "guest_spec",
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


# -- the forward path ------------------------------------------------------------------------


def _prep_recorded(session: Session, instance: Instance, run: StepRun) -> None:
    """The move's record on the destination (Nova's MigrationContext: the old and new PCI
    devices, where the destination keeps instance directories)."""
    migration = get_migration(session, migration_of(run))
    uuid = instance.uuid
    cas_update(session, uuid, expected_task_state=[TaskState.RESIZE_PREP])
    dest = node_id(session, migration.dest_compute, migration.dest_node)
    source = node_id(session, migration.source_compute, migration.source_node)
    migration.context = migration.context.model_copy(
        update={
            "new_pci_devices": tuple(d.address for d in held_devices(session, uuid, dest)),
            "old_pci_devices": tuple(
                d.address for d in held_devices(session, migration.uuid, source)
            ),
            # NOTE: the source copies the disks here (a local path on one machine).
            "dest_instances_path": str(run.ctx.driver.instances_path),
        }
    )
    if instance.old_vm_state is None:
        instance.old_vm_state = instance.vm_state
    return None


#: On the destination: check the claim the scheduler made is here (its hypervisor
#: answers), and record what the move holds.
PREP_RESIZE = move_step(
    "prep_resize",
    TaskState.RESIZE_PREP,
    lambda ctx, run: ctx.driver.get_available_resource(),
    _prep_recorded,
)


def _migrate_disks(ctx: StepContext, run: StepRun) -> None:
    uuid = run.instance_uuid
    with ctx.sessions() as session:
        cas_update(
            session,
            uuid,
            expected_task_state=[TaskState.RESIZE_PREP, TaskState.RESIZE_MIGRATING],
            task_state=TaskState.RESIZE_MIGRATING,
        )
        migration = set_migration(session, migration_of(run), MigrationStatus.MIGRATING)
        instance = get_instance(session, uuid)
        old = guest_spec(session, instance, migration.flavors.old, [])
        new = guest_spec(session, instance, migration.flavors.new, [])
        dest = _local_copy_target(session, ctx, migration)
    # Nova refuses a shrink before it touches the guest, so check before the power-off.
    check_can_resize(old, new)
    _power_off_cleanly(ctx, uuid)
    ctx.driver.migrate_disk_and_power_off(old, new, dest)


def _local_copy_target(session: Session, ctx: StepContext, migration: Migration) -> str | None:
    """Where the source copies the disks itself: nowhere (None) when it publishes a disk
    endpoint and the destination is another host, which pulls them; else the
    destination's instances path (a same-host resize, or one machine without a secret)."""
    same_host = migration.source_compute == migration.dest_compute
    if not same_host and disk_endpoint_of(session, ctx.host) is not None:
        return None
    if not same_host:
        warn_local_copies(ctx.host)
    # NOTE: without a recorded destination path the instances path is shared (Nova's
    # shared storage): the destination's directory is this host's.
    return migration.context.dest_instances_path or str(ctx.driver.instances_path)


def _migrated(session: Session, instance: Instance, run: StepRun) -> None:
    migration = get_migration(session, migration_of(run))
    cas_update(
        session,
        instance.uuid,
        expected_task_state=[TaskState.RESIZE_MIGRATING],
        task_state=TaskState.RESIZE_MIGRATED,
        host=migration.dest_compute,
        node=migration.dest_node,
    )
    set_migration(session, migration.uuid, MigrationStatus.POST_MIGRATING)
    return None


def _roll_back(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """Nova's ``InstanceFaultRollback`` of a refused resize: the accounting back on the
    source, the server as it was (task cleared) with the fault, the migration in error."""
    migration_uuid = migration_of(run)

    def work(session: Session) -> None:
        migration = get_migration(session, migration_uuid)
        if migration.status not in IN_PROGRESS:
            return
        give_back_source(session, migration)
        instance = get_instance(session, run.instance_uuid)
        instance.task_state = None
        pop_old_vm_state(instance)
        actions.add_fault(session, run.instance_uuid, exc, ctx.host)
        set_migration(session, migration_uuid, MigrationStatus.ERROR)

    if isinstance(exc, ResizeError):
        retry_on_conflict(ctx.sessions, work)
        LOG.warning("Migration %s rolled back on %s: %s", migration_uuid, ctx.host, exc)
    close_event(ctx, run, exc)


#: On the source: take the guest down and copy its disks to the destination (the
#: originals kept until confirm or revert), then point the instance at the destination.
#: A shrink is refused before anything moves and rolls the move back.
RESIZE_INSTANCE = move_step(
    "resize_instance", TaskState.RESIZE_MIGRATING, _migrate_disks, _migrated, undo=_roll_back
)


def _power_off_cleanly(ctx: StepContext, instance_uuid: str) -> None:
    """Nova's ``migrate_disk_and_power_off`` starts with a clean power-off (the image's
    ``os_shutdown_timeout`` or ``shutdown_timeout``), so the guest's disks are quiet."""
    if ctx.driver.instance_exists(instance_uuid):
        with ctx.sessions() as session:
            timeout = instance_power_off_timeout(session, instance_uuid, ctx.shutdown_timeout_s)
        ctx.driver.power_off(instance_uuid, timeout)


def _start_on_destination(ctx: StepContext, run: StepRun) -> int:
    uuid = run.instance_uuid
    with ctx.sessions() as session:
        migration = get_migration(session, migration_of(run))
        cas_update(
            session,
            uuid,
            expected_task_state=[TaskState.RESIZE_MIGRATED, TaskState.RESIZE_FINISH],
            task_state=TaskState.RESIZE_FINISH,
        )
        instance = get_instance(session, uuid)
        take_flavor(instance, migration.flavors.new, migration.context.new_pci_requests)
        dest = node_id(session, migration.dest_compute, migration.dest_node)
        addresses = [d.address for d in held_devices(session, uuid, dest)]
        spec = guest_spec(session, instance, migration.flavors.new, addresses)
        stopped = instance.old_vm_state == VmState.STOPPED
        # Read now, not when the move began: a source restarted since is found at its
        # new address. None: the disks are here already (copied, or a same-host resize).
        source = migration.source_compute
        disks_from = None if source in (None, ctx.host) else disk_endpoint_of(session, source)
    info = ctx.driver.finish_migration(spec, power_on=not stopped, disks_from=disks_from)
    return info.power_state


def _resized(session: Session, instance: Instance, run: StepRun) -> None:
    cas_update(
        session,
        instance.uuid,
        expected_task_state=[TaskState.RESIZE_FINISH],
        vm_state=VmState.RESIZED,
        task_state=None,
        power_state=run.result,
    )
    set_migration(session, migration_of(run), MigrationStatus.FINISHED)
    return None


#: On the destination: the instance takes the new flavor and its guest starts with
#: exactly the devices the new flavor asks for; a stopped server stays stopped.
FINISH_RESIZE = move_step(
    "finish_resize",
    TaskState.RESIZE_FINISH,
    _start_on_destination,
    _resized,
    on_superseded=take_down_guest,
    finish_action=True,  # VERIFY_RESIZE ends the resize (or migrate) request
)


# -- confirm and revert ------------------------------------------------------------------------


def _drop_originals(ctx: StepContext, run: StepRun) -> None:
    # The source guest went down in resize_instance: its kept files and the accounting
    # are left here. Files first, as Nova's confirm_migration, so the server is ACTIVE
    # only once they are gone.
    ctx.driver.confirm_migration(run.instance_uuid)
    drop_files_unless_same_host(ctx, run)


def _confirmed(session: Session, instance: Instance, run: StepRun) -> None:
    migration = get_migration(session, migration_of(run))
    if migration.status == MigrationStatus.CONFIRMED:
        return None
    source = node_id(session, migration.source_compute, migration.source_node)
    confirm_move(session, migration.uuid, source)
    vm_state = VmState.STOPPED if instance.power_state == power_state.SHUTDOWN else VmState.ACTIVE
    cas_update(
        session,
        instance.uuid,
        expected_vm_state=[VmState.RESIZED],
        expected_task_state=[None],
        vm_state=vm_state,
    )
    pop_old_vm_state(instance)
    set_migration(session, migration.uuid, MigrationStatus.CONFIRMED)
    return None


#: On the source: drop what the migration holds there; the server settles as ACTIVE, or
#: SHUTOFF if its guest is off (Nova). Nova's confirm sets no task_state, so the step
#: knows its request is still wanted by the request's action: one the API took back
#: after its publish failed (``workflows.api.submit``) has none, and the step is skipped.
CONFIRM_RESIZE = move_step(
    "confirm_resize",
    TaskState.RESIZE_MIGRATED,
    _drop_originals,
    _confirmed,
    once_per_request=True,
    finish_action=True,
)


def _take_down_new_guest(ctx: StepContext, run: StepRun) -> None:
    # As Nova's destroy on the destination: guest and (unless shared) files first.
    ctx.driver.destroy(run.instance_uuid)
    drop_files_unless_same_host(ctx, run)


def _reverted(session: Session, instance: Instance, run: StepRun) -> None:
    migration = get_migration(session, migration_of(run))
    if migration.status == MigrationStatus.REVERTED:
        return None
    give_back_source(session, migration)
    instance.host, instance.node = migration.source_compute, migration.source_node
    set_migration(session, migration.uuid, MigrationStatus.REVERTED)
    return None


#: Both steps of a revert begin by compare-and-swap on the ``resize_reverting`` the API
#: set: a revert the API took back after its publish failed (``workflows.api.submit``),
#: or one a delete took over, is skipped instead of taking a guest down.
REVERTING = {"any_task": False, "begin_tasks": (TaskState.RESIZE_REVERTING,)}

#: On the destination: take the new guest down, free the destination and give the source
#: back to the instance, in one transaction (so no audit ever sees a gap).
REVERT_RESIZE = move_step(
    "revert_resize", TaskState.RESIZE_REVERTING, _take_down_new_guest, _reverted, **REVERTING
)


def _start_on_source(ctx: StepContext, run: StepRun) -> tuple[int, bool]:
    uuid = run.instance_uuid
    with ctx.sessions() as session:
        migration = get_migration(session, migration_of(run))
        instance = get_instance(session, uuid)
        source = node_id(session, migration.source_compute, migration.source_node)
        addresses = [d.address for d in held_devices(session, uuid, source)]
        spec = guest_spec(session, instance, migration.flavors.old, addresses)
        stopped = instance.old_vm_state == VmState.STOPPED
    info = ctx.driver.finish_revert_migration(spec, power_on=not stopped)
    return info.power_state, stopped


def _back_on_source(session: Session, instance: Instance, run: StepRun) -> None:
    power, stopped = run.result
    cas_update(
        session,
        instance.uuid,
        expected_task_state=[TaskState.RESIZE_REVERTING],
        vm_state=VmState.STOPPED if stopped else VmState.ACTIVE,
        task_state=None,
        power_state=power,
    )
    pop_old_vm_state(instance)
    return None


#: On the source: start the guest again on its original disks, with its old flavor and
#: old devices.
FINISH_REVERT_RESIZE = move_step(
    "finish_revert_resize",
    TaskState.RESIZE_REVERTING,
    _start_on_source,
    _back_on_source,
    on_superseded=take_down_guest,
    finish_action=True,
    **REVERTING,
)


def prep_resize(ctx: MoveContext) -> None:
    """On the destination: the claim checked, the move recorded (``PREP_RESIZE``)."""
    run_move(ctx, PREP_RESIZE)


def resize_instance(ctx: MoveContext) -> None:
    """On the source: the guest down, its disks copied (``RESIZE_INSTANCE``)."""
    run_move(ctx, RESIZE_INSTANCE)


def finish_resize(ctx: MoveContext) -> None:
    """On the destination: the new flavor, the guest started (``FINISH_RESIZE``)."""
    run_move(ctx, FINISH_RESIZE)


def confirm_resize(ctx: MoveContext) -> None:
    """On the source: the originals and the source claim dropped (``CONFIRM_RESIZE``)."""
    run_move(ctx, CONFIRM_RESIZE)


def revert_resize(ctx: MoveContext) -> None:
    """On the destination: the new guest down, the source given back (``REVERT_RESIZE``)."""
    run_move(ctx, REVERT_RESIZE)


def finish_revert_resize(ctx: MoveContext) -> None:
    """On the source: the guest started on its originals (``FINISH_REVERT_RESIZE``)."""
    run_move(ctx, FINISH_REVERT_RESIZE)
