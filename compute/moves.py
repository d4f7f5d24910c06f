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

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.claims import (
    ResourceRequest,
    claim_first,
    claim_in_session,
    confirm_move_in_session,
    move_consumer,
    release_in_session,
    retry_on_conflict,
)
from compute.instance_state import cas_update, get_instance
from compute.pci import PciRequest, held_devices
from compute.power import DEFAULT_SHUTDOWN_TIMEOUT_S, instance_power_off_timeout
from compute.resource_tracker import get_node
from compute.states import TaskState, VmState
from models import Instance, Migration, utcnow
from models.db import session_scope
from novaq.exceptions import (
    InstanceNotFound,
    NotFound,
    ResizeError,
    ResourcesUnavailable,
    UnexpectedTaskStateError,
)
from virt import power_state
from virt.driver import ComputeDriver, GuestSpec, check_can_resize

LOG = logging.getLogger(__name__)

IN_PROGRESS = (
    "pre-migrating",
    "migrating",
    "post-migrating",
    "finished",
    "confirming",
    "reverting",
)


#: A move that reached VERIFY_RESIZE and waits (or is on its way) to be confirmed.
UNCONFIRMED = ("finished", "confirming")


class MigrationNotFound(NotFound):
    msg_fmt = "Migration %(migration)s could not be found."


def get_migration(session: Session, migration_uuid: str) -> Migration:
    migration = session.scalars(select(Migration).where(Migration.uuid == migration_uuid)).first()
    if migration is None:
        raise MigrationNotFound(migration=migration_uuid)
    return migration


def active_migration(session: Session, instance_uuid: str) -> Migration | None:
    return session.scalars(
        select(Migration)
        .where(Migration.instance_uuid == instance_uuid, Migration.status.in_(IN_PROGRESS))
        .order_by(Migration.id.desc())
    ).first()


def pci_requests(data: list[dict[str, Any]] | None) -> list[PciRequest]:
    return [PciRequest.from_dict(p) for p in data or ()]


def new_request(migration: Migration) -> ResourceRequest:
    return ResourceRequest.from_flavor(
        migration.new_flavor, pci_requests(migration.context.get("new_pci_requests"))
    )


def node_id(session: Session, host: str | None, node: str | None) -> int:
    row = get_node(session, host or "", node or "")
    if row is None:
        raise ResourcesUnavailable(node=f"{host}/{node}", reason="compute node is gone")
    return row.id


def guest_spec(
    session: Session, instance: Instance, flavor: dict[str, Any], addresses: list[str]
) -> GuestSpec:
    from compute.build import guest_spec as build_guest_spec

    return build_guest_spec(session, instance, tuple(addresses), flavor)


@dataclass(frozen=True, slots=True)
class StepContext:
    db_url: str
    driver: ComputeDriver
    migration_uuid: str
    request_id: str
    host: str
    #: ``[DEFAULT] shutdown_timeout``: how long the source waits for a clean shutdown.
    shutdown_timeout_s: int = DEFAULT_SHUTDOWN_TIMEOUT_S


@contextmanager
def step(ctx: StepContext, event: str) -> Iterator[str]:
    """One move step recorded as an action event; yields the instance uuid."""
    with session_scope(ctx.db_url) as session:
        instance_uuid = get_migration(session, ctx.migration_uuid).instance_uuid
    with actions.event_reporter(ctx.db_url, instance_uuid, ctx.request_id, event, ctx.host):
        yield instance_uuid


def _set_migration(session: Session, migration_uuid: str, status: str, **values: Any) -> Migration:
    migration = get_migration(session, migration_uuid)
    migration.status = status
    migration.updated_at = utcnow()
    for key, value in values.items():
        setattr(migration, key, value)
    return migration


# -- the forward path ------------------------------------------------------------------------


def prep_resize(ctx: StepContext) -> None:
    """On the destination: check the claim the scheduler made is here, and record what the
    move holds (Nova's MigrationContext: the old and new PCI devices)."""
    with step(ctx, "compute_prep_resize") as instance_uuid:
        ctx.driver.get_available_resource()  # the destination's hypervisor answers
        with session_scope(ctx.db_url) as session:
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


def resize_instance(ctx: StepContext) -> None:
    """On the source: take the guest down and copy its disks to the destination (the
    originals kept until confirm or revert), then point the instance at the destination.
    A shrink is refused before anything moves and rolls the move back."""
    with step(ctx, "compute_resize_instance") as instance_uuid:
        with session_scope(ctx.db_url) as session:
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_PREP, TaskState.RESIZE_MIGRATING],
                task_state=TaskState.RESIZE_MIGRATING,
            )
            migration = _set_migration(session, ctx.migration_uuid, "migrating")
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
        with session_scope(ctx.db_url) as session:
            migration = get_migration(session, ctx.migration_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_MIGRATING],
                task_state=TaskState.RESIZE_MIGRATED,
                host=migration.dest_compute,
                node=migration.dest_node,
            )
            _set_migration(session, ctx.migration_uuid, "post-migrating")


def _power_off_cleanly(ctx: StepContext, instance_uuid: str) -> None:
    """Nova's ``migrate_disk_and_power_off`` starts with a clean power-off (the image's
    ``os_shutdown_timeout`` or ``shutdown_timeout``), so the guest's disks are quiet."""
    if ctx.driver.instance_exists(instance_uuid):
        with session_scope(ctx.db_url) as session:
            timeout = instance_power_off_timeout(session, instance_uuid, ctx.shutdown_timeout_s)
        ctx.driver.power_off(instance_uuid, timeout)


def finish_resize(ctx: StepContext) -> None:
    """On the destination: the instance takes the new flavor and its guest starts with
    exactly the devices the new flavor asks for; a stopped server stays stopped."""
    with step(ctx, "compute_finish_resize") as instance_uuid:
        with session_scope(ctx.db_url) as session:
            migration = get_migration(session, ctx.migration_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_MIGRATED, TaskState.RESIZE_FINISH],
                task_state=TaskState.RESIZE_FINISH,
            )
            instance = get_instance(session, instance_uuid)
            _take_flavor(instance, migration.new_flavor, migration.context.get("new_pci_requests"))
            dest = node_id(session, migration.dest_compute, migration.dest_node)
            addresses = [d.address for d in held_devices(session, instance_uuid, dest)]
            spec = guest_spec(session, instance, migration.new_flavor, addresses)
            stopped = instance.system_metadata.get("old_vm_state") == VmState.STOPPED
        info = ctx.driver.finish_migration(spec, power_on=not stopped)
        with _or_take_down(ctx.driver, instance_uuid), session_scope(ctx.db_url) as session:
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_FINISH],
                vm_state=VmState.RESIZED,
                task_state=None,
                power_state=info.power_state,
            )
            _set_migration(session, ctx.migration_uuid, "finished")


def _roll_back(ctx: StepContext, instance_uuid: str, exc: BaseException) -> None:
    """Nova's ``InstanceFaultRollback`` of a refused resize: the accounting back on the
    source, the server as it was (task cleared) with the fault, the migration in error."""

    def work(session: Session) -> None:
        migration = get_migration(session, ctx.migration_uuid)
        if migration.status not in IN_PROGRESS:
            return
        give_back_source(session, migration)
        instance = get_instance(session, instance_uuid)
        instance.task_state = None
        _pop_old_vm_state(instance)
        actions.add_fault(session, instance_uuid, exc, ctx.host)
        _set_migration(session, ctx.migration_uuid, "error")

    retry_on_conflict(ctx.db_url, work)
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


def _take_flavor(
    instance: Instance, flavor: dict[str, Any], pci: list[dict[str, Any]] | None
) -> None:
    instance.flavor = dict(flavor)
    instance.vcpus, instance.memory_mb = flavor["vcpus"], flavor["memory_mb"]
    instance.root_gb, instance.ephemeral_gb = flavor["root_gb"], flavor.get("ephemeral_gb", 0)
    spec = dict(instance.request_spec or {})
    spec["flavor"] = dict(flavor)
    spec["pci_requests"] = list(pci or [])
    instance.request_spec = spec


# -- confirm and revert ------------------------------------------------------------------------


def confirm_resize(ctx: StepContext) -> None:
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
            _pop_old_vm_state(instance)
            _set_migration(session, ctx.migration_uuid, "confirmed")

        retry_on_conflict(ctx.db_url, work)


def revert_resize(ctx: StepContext) -> None:
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
            _set_migration(session, ctx.migration_uuid, "reverted")

        retry_on_conflict(ctx.db_url, work)


def _drop_originals(ctx: StepContext, instance_uuid: str) -> None:
    ctx.driver.confirm_migration(instance_uuid)
    _drop_files_unless_same_host(ctx, instance_uuid)


def _drop_files_unless_same_host(ctx: StepContext, instance_uuid: str) -> None:
    """Nova's ``_cleanup_resize`` / revert cleanup: the side the server left keeps no
    instance directory (a same-host resize shares it, so it stays)."""
    with session_scope(ctx.db_url) as session:
        migration = get_migration(session, ctx.migration_uuid)
        same_host = migration.source_compute == migration.dest_compute
    if not same_host:
        ctx.driver.delete_instance_files(instance_uuid)


def finish_revert_resize(ctx: StepContext) -> None:
    """On the source: start the guest again on its original disks, with its old flavor
    and old devices."""
    with step(ctx, "compute_finish_revert_resize") as instance_uuid:
        with session_scope(ctx.db_url) as session:
            migration = get_migration(session, ctx.migration_uuid)
            instance = get_instance(session, instance_uuid)
            source = node_id(session, migration.source_compute, migration.source_node)
            addresses = [d.address for d in held_devices(session, instance_uuid, source)]
            spec = guest_spec(session, instance, migration.old_flavor, addresses)
            stopped = instance.system_metadata.get("old_vm_state") == VmState.STOPPED
        info = ctx.driver.finish_revert_migration(spec, power_on=not stopped)
        with _or_take_down(ctx.driver, instance_uuid), session_scope(ctx.db_url) as session:
            instance = get_instance(session, instance_uuid)
            cas_update(
                session,
                instance_uuid,
                expected_task_state=[TaskState.RESIZE_REVERTING],
                vm_state=VmState.STOPPED if stopped else VmState.ACTIVE,
                task_state=None,
                power_state=info.power_state,
            )
            _pop_old_vm_state(instance)


def give_back_source(session: Session, migration: Migration) -> None:
    """Revert the accounting of a move: the instance's destination claim goes, the
    migration's source allocation (and devices) go back to the instance, and the
    instance takes its old flavor again."""
    instance = get_instance(session, migration.instance_uuid)
    if migration.dest_node is not None:
        dest = node_id(session, migration.dest_compute, migration.dest_node)
        release_in_session(session, instance.uuid, dest)
    source = node_id(session, migration.source_compute, migration.source_node)
    move_consumer(session, migration.uuid, instance.uuid, source)
    _take_flavor(instance, migration.old_flavor, migration.context.get("old_pci_requests"))


def _pop_old_vm_state(instance: Instance) -> None:
    sysmeta = dict(instance.system_metadata or {})
    sysmeta.pop("old_vm_state", None)
    instance.system_metadata = sysmeta


# -- failure -------------------------------------------------------------------------------------


MOVE_TASK_STATES = (
    TaskState.RESIZE_PREP,
    TaskState.RESIZE_MIGRATING,
    TaskState.RESIZE_MIGRATED,
    TaskState.RESIZE_FINISH,
    TaskState.RESIZE_REVERTING,
)


def abort_move(db_url: str, migration_uuid: str, exc: BaseException, host: str | None) -> bool:
    """The one undo of a move that failed: the accounting follows the instance (back to
    the source if it is still there, kept on the destination if the instance already
    moved), the migration goes to ``error``, the instance to ERROR with a fault. A move
    whose accounting already ended (a revert that failed while restarting the guest on
    the source) only errors the instance out. Idempotent: False once nothing is left."""

    def work(session: Session) -> bool:
        migration = get_migration(session, migration_uuid)
        instance = get_instance(session, migration.instance_uuid)
        in_flight = migration.status in IN_PROGRESS
        if not in_flight and instance.task_state not in MOVE_TASK_STATES:
            return False
        if in_flight:
            _settle_accounting(session, migration, instance)
            _set_migration(session, migration_uuid, "error")
        instance.vm_state, instance.task_state = VmState.ERROR, None
        instance.updated_at = utcnow()
        actions.add_fault(session, instance.uuid, exc, host)
        actions.finish_action(session, instance.uuid, migration.request_id or "", actions.ERROR)
        return True

    done = retry_on_conflict(db_url, work)
    if done:
        LOG.warning("Migration %s failed, instance now ERROR: %s", migration_uuid, exc)
    return done


def _settle_accounting(session: Session, migration: Migration, instance: Instance) -> None:
    if instance.host == migration.source_compute and instance.node == migration.source_node:
        give_back_source(session, migration)
    else:
        source = node_id(session, migration.source_compute, migration.source_node)
        confirm_move_in_session(session, migration.uuid, source)
        _take_flavor(instance, migration.new_flavor, migration.context.get("new_pci_requests"))


def fail_scheduling(db_url: str, migration_uuid: str, exc: BaseException) -> None:
    """No host for the move: the server stays where it was, in the state it was, with the
    fault and a failed event (Nova's conductor rollback); the migration goes to error."""
    with session_scope(db_url) as session:
        migration = get_migration(session, migration_uuid)
        if migration.status != "pre-migrating":
            return
        instance = get_instance(session, migration.instance_uuid)
        if instance.task_state == TaskState.RESIZE_PREP:
            instance.task_state = None
        _pop_old_vm_state(instance)
        actions.add_fault(session, instance.uuid, exc, None)
        actions.record_event(
            session,
            instance.uuid,
            migration.request_id or "",
            "conductor_migrate_server",
            None,
            exc,
        )
        _set_migration(session, migration_uuid, "error")


def reschedule_move(
    db_url: str,
    migration_uuid: str,
    alternates: tuple[tuple[str, str, int], ...],
    exc: BaseException,
    failed_host: str,
) -> tuple[tuple[str, str, int], tuple[tuple[str, str, int], ...]] | None:
    """prep_resize failed on the destination: move the destination claim to the first
    alternate that can take it (Nova's reschedule of a resize), with a fault."""

    def work(session: Session, alternate: tuple[str, str, int]) -> None:
        host, node, nid = alternate
        migration = get_migration(session, migration_uuid)
        dest = node_id(session, migration.dest_compute, migration.dest_node)
        release_in_session(session, migration.instance_uuid, dest)
        claim_in_session(session, nid, migration.instance_uuid, new_request(migration))
        migration.dest_compute, migration.dest_node = host, node
        actions.add_fault(session, migration.instance_uuid, exc, failed_host)

    def refused(alternate: tuple[str, str, int], claim_error: ResourcesUnavailable) -> None:
        LOG.info(
            "Migration %s: alternate %s cannot take it: %s",
            migration_uuid,
            alternate[0],
            claim_error,
        )

    fit = claim_first(db_url, alternates, work, lambda alternate: alternate[0], refused)
    if fit.chosen is None:
        return None
    return fit.chosen, alternates[fit.index + 1 :]


def drop_moves(session: Session, instance_uuid: str) -> None:
    """A deleted server ends its moves: what their migrations hold is released.

    A move waiting to be confirmed is ``confirmed`` when both ends are this host (the
    terminate here removes ``<uuid>_resize`` with the rest); otherwise its originals still
    lie on the source, so it goes to ``error`` like every other unfinished move, and
    ``_cleanup_incomplete_migrations`` on the host the server left removes them on its
    next pass (Nova's path for a server deleted mid-move; ``_poll_unconfirmed_resizes``
    errors the migration of a deleted server, the cleanup then fails it).

    NOTE: Nova's API instead confirms on the source before deleting
    (``_confirm_resize_on_deleting``). novaq does not put the source in the delete's path:
    a delete must never wait on another host's worker (a dead source whose message sits
    unacked until the visibility timeout would leave the server in ``deleting``); the
    source's periodic pass is the durable cleanup.
    """
    for migration in session.scalars(
        select(Migration).where(
            Migration.instance_uuid == instance_uuid, Migration.status.in_(IN_PROGRESS)
        )
    ):
        release_in_session(session, migration.uuid)
        same_host = migration.source_compute == migration.dest_compute
        confirmed = migration.status in UNCONFIRMED and same_host
        migration.status = "confirmed" if confirmed else "error"
        migration.updated_at = utcnow()
