"""Rebuild and evacuate on a compute host (Nova's ``rebuild_instance``, with ``recreate``
for an evacuation), and the one undo of an evacuation that failed anywhere on its way.

Both are one host step (``REBUILD`` on the server's own host, ``EVACUATE`` on the
destination the scheduler claimed) that remakes the guest as Nova's
``_rebuild_default_impl`` does: the guest taken down (a rebuild powers it off cleanly
first), its disks removed, task_state ``rebuild_block_device_mapping`` then
``rebuild_spawning``, the guest spawned again through the build's own path
(``driver.spawn``: base image, instance directory, disks from the image, domain XML with
exactly the PCI devices the instance holds on this node). The server ends ACTIVE, or
STOPPED if it was stopped (Nova spawns, then stops it); launched_at is renewed.

Claims, as Nova's: a rebuild keeps its host and flavor (``NopClaim``): nothing is claimed
or released. An evacuation's claim is made by the scheduler (``scheduler.evacuate``):
the migration takes the source allocation over, the instance claims the destination;
the source allocation stays with the migration after ``done``, until the source's
start-up recovery destroys the guest left there and drops it
(``compute.recovery.evacuated``), so a source that comes back is never overcommitted.

Instance directories are per host here (Nova's ``on_shared_storage`` is detected from the
destination's files, as Nova ≥ 2.14 does): the destination never has the source's disks,
so an evacuated server is always rebuilt from its image (its disk data is not carried
over, as Nova's evacuation from local storage). Files found on the destination are a
half-made attempt of this same step, removed before the spawn.

A failure of the rebuild step puts the server in ERROR with a fault (Nova's
``_error_out_instance_on_exception``). A failed evacuation (no host, a failed spawn, a
lost message) is undone by ``abort_evacuation``: the destination's guest and files go,
the instance goes back to its source with the source allocation given back, ERROR with a
fault, the migration ``error`` (before a destination was claimed) or ``failed``.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.orm import Session

from compute import images
from compute import instance_actions as actions
from compute.build import destroy_deleted_guest, destroy_quietly
from compute.claims import move_consumer, release, retry_on_conflict
from compute.failure_policies import error
from compute.guest import guest_spec
from compute.instance_state import cas_update, get_instance
from compute.migrations import MigrationNotFound, get_migration, node_id, set_migration
from compute.pci import held_devices
from compute.power import instance_power_off_timeout
from compute.resource_tracker import get_node
from compute.sessions import Sessions
from compute.states import TaskState, VmState
from compute.steps import SKIPPED, Step, StepContext, StepRun, abort, close_event, run_step
from models import Image, Instance, utcnow
from models.states import MigrationStatus
from novaq.exceptions import InstanceNotFound, NovaqError
from virt.driver import GuestSpec

LOG = logging.getLogger(__name__)

REBUILD_TASKS = (
    TaskState.REBUILDING,
    TaskState.REBUILD_BLOCK_DEVICE_MAPPING,
    TaskState.REBUILD_SPAWNING,
)
REBUILD_EVENT = "compute_rebuild_instance"
SCHEDULE_EVENT = "conductor_rebuild_server"
#: An evacuation still under way (what its undo may end).
EVACUATION_LIVE = (MigrationStatus.ACCEPTED, MigrationStatus.PRE_MIGRATING)


# -- the host step ---------------------------------------------------------------------------


def _spec(ctx: StepContext, run: StepRun, session: Session, instance: Instance) -> GuestSpec:
    """The guest as it must be after the rebuild: the instance's (new) image and flavor,
    and exactly the PCI devices the instance holds on this host's node."""
    node = get_node(session, ctx.host, instance.node or "")
    if run.params.get("migration_uuid"):
        migration = get_migration(session, str(run.params["migration_uuid"]))
        node = get_node(session, migration.dest_compute or "", migration.dest_node or "")
    devices = held_devices(session, instance.uuid, node.id if node is not None else None)
    return guest_spec(session, instance, tuple(d.address for d in devices))


def _recreate(ctx: StepContext, run: StepRun) -> bool:
    """Nova's ``_rebuild_default_impl``: down, disks gone, BDM, spawn; True when the
    server was stopped (its new guest is then stopped too)."""
    uuid = run.instance_uuid
    migration_uuid = run.params.get("migration_uuid")
    with ctx.sessions() as session:
        instance = get_instance(session, uuid)
        spec = _spec(ctx, run, session, instance)
        timeout = instance_power_off_timeout(session, uuid, ctx.shutdown_timeout_s)
        moved: dict[str, Any] = {}
        if migration_uuid:
            migration = get_migration(session, str(migration_uuid))
            moved = {"host": migration.dest_compute, "node": migration.dest_node}
    stopped = run.vm_state == VmState.STOPPED
    if migration_uuid is None:
        if ctx.driver.instance_exists(uuid):
            ctx.driver.power_off(uuid, timeout)
    elif ctx.driver.instance_files_exist(uuid) or ctx.driver.instance_exists(uuid):
        # Not shared storage (instance directories are per host): what is here is a
        # half-made attempt of this evacuation, redelivered.
        LOG.info("Evacuation of %s: removing a former attempt's guest on %s", uuid, ctx.host)
    ctx.driver.destroy(uuid)
    ctx.driver.delete_instance_files(uuid)
    # An evacuated instance is on this host from here on (Nova sets host before spawning).
    run.advance(REBUILD_TASKS, task_state=TaskState.REBUILD_BLOCK_DEVICE_MAPPING, **moved)
    run.advance(REBUILD_TASKS, task_state=TaskState.REBUILD_SPAWNING)
    ctx.driver.spawn(spec)
    if stopped:
        # Nova: vm ACTIVE + powering-off, then stop_instance(clean_shutdown=False).
        ctx.driver.power_off(uuid, 0)
    return stopped


def _rebuilt(session: Session, instance: Instance, run: StepRun) -> dict[str, Any]:
    migration_uuid = run.params.get("migration_uuid")
    if migration_uuid:
        set_migration(session, str(migration_uuid), MigrationStatus.DONE)
    vm_state = VmState.STOPPED if run.result else VmState.ACTIVE
    return {"vm_state": vm_state, "launched_at": utcnow()}


def _evacuation_failed(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """The spawn on the destination failed: its guest and files go (before any database
    write, so they go even when the database does not answer), then the evacuation is
    undone and the step's event closed with the error."""
    destroy_quietly(ctx.driver, run.instance_uuid)
    try:
        ctx.driver.delete_instance_files(run.instance_uuid)
    except Exception:  # noqa: BLE001 - cleanup must not mask the failure being handled
        LOG.exception("Evacuation of %s: could not remove its files", run.instance_uuid)
    abort_evacuation(ctx.sessions, str(run.params["migration_uuid"]), exc, ctx.host, event=None)
    close_event(ctx, run, exc)


def _deleted_meanwhile(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """A delete took the server over mid-rebuild (the only request that can): take the
    new guest and its files down again, since the delete ran before they existed here."""
    uuid = run.instance_uuid
    with ctx.sessions() as session:
        try:
            deleted = bool(get_instance(session, uuid).deleted)
        except InstanceNotFound:
            deleted = True
    if deleted:
        LOG.info("Instance %s was deleted while being rebuilt on %s", uuid, ctx.host)
        destroy_deleted_guest(ctx, uuid)
        ctx.driver.delete_instance_files(uuid)
    close_event(ctx, run, exc)


#: On the server's own host: a new guest from the new image, same flavor and devices.
REBUILD = Step(
    "rebuild",
    REBUILD_EVENT,
    TaskState.REBUILDING,
    REBUILD_TASKS,
    _recreate,
    _rebuilt,
    on_failure=error,
    # A redelivered step resumes from whichever rebuild state its worker died in.
    begin_tasks=REBUILD_TASKS,
    on_superseded=_deleted_meanwhile,
)

#: On the evacuation's destination (the instance is still recorded on its source).
EVACUATE = Step(
    "evacuate",
    REBUILD_EVENT,
    TaskState.REBUILDING,
    REBUILD_TASKS,
    _recreate,
    _rebuilt,
    on_failure=error,
    begin_tasks=REBUILD_TASKS,
    check_host=False,
    undo=_evacuation_failed,
    on_superseded=_deleted_meanwhile,
)


def rebuild_instance(ctx: StepContext, instance_uuid: str) -> str:
    """Rebuild the server on this host (``REBUILD``): done, skipped or superseded."""
    return run_step(ctx, REBUILD, instance_uuid)


def evacuate_instance(ctx: StepContext, migration_uuid: str) -> str:
    """Rebuild the evacuated server here, its destination (``EVACUATE``)."""
    with ctx.sessions() as session:
        migration = get_migration(session, migration_uuid)
        instance_uuid = migration.instance_uuid
        if migration.status != MigrationStatus.PRE_MIGRATING or migration.dest_compute != ctx.host:
            # A redelivery of an evacuation that ended (or of one meant for another host).
            LOG.info(
                "Evacuation %s is %s: nothing to do on %s",
                migration_uuid,
                migration.status,
                ctx.host,
            )
            return SKIPPED
    return run_step(ctx, EVACUATE, instance_uuid, migration_uuid=migration_uuid)


# -- the undo of an evacuation ---------------------------------------------------------------


def abort_evacuation(
    sessions: Sessions,
    migration_uuid: str,
    exc: BaseException,
    host: str | None,
    event: str | None = REBUILD_EVENT,
) -> bool:
    """The one undo of an evacuation that failed (the scheduler found no host, the spawn
    failed, the errback or the reaper after a lost step): the destination claim released
    and the source allocation given back to the instance, the instance back on its source
    in ERROR with a fault (Nova's conductor and ``_error_out_instance_on_exception``), the
    migration ``error`` if no destination was claimed yet, else ``failed``; ``event``
    (when not None) recorded with the error and the action closed. Idempotent: False
    once the evacuation has ended."""

    def work(session: Session) -> bool:
        try:
            migration = get_migration(session, migration_uuid)
        except MigrationNotFound:
            return False  # taken back by the API after its publish failed
        instance = get_instance(session, migration.instance_uuid, lock=True)
        if migration.status not in EVACUATION_LIVE:
            return False
        claimed = migration.dest_node is not None
        if claimed:
            dest = node_id(session, migration.dest_compute, migration.dest_node)
            release(session, instance.uuid, dest)
            source = node_id(session, migration.source_compute, migration.source_node)
            move_consumer(session, migration.uuid, instance.uuid, source)
        set_migration(
            session,
            migration_uuid,
            MigrationStatus.FAILED if claimed else MigrationStatus.ERROR,
        )
        if instance.deleted:
            return True
        instance.host, instance.node = migration.source_compute, migration.source_node
        if instance.task_state in REBUILD_TASKS:
            instance.vm_state, instance.task_state = VmState.ERROR, None
        instance.updated_at = utcnow()
        actions.add_fault(session, instance.uuid, exc, host)
        request_id = migration.request_id or ""
        if event is not None:
            actions.record_event(session, instance.uuid, request_id, event, host, exc)
        else:
            actions.finish_action(session, instance.uuid, request_id, actions.ERROR)
        return True

    done = retry_on_conflict(sessions, work)
    if done:
        LOG.warning("Evacuation %s failed, instance back on its source: %s", migration_uuid, exc)
    return done


def fail_rebuild_scheduling(
    sessions: Sessions,
    instance_uuid: str,
    request_id: str,
    exc: BaseException,
    orig_image_ref: str,
) -> bool:
    """The server's host cannot run the new image (Nova's conductor): the server in ERROR
    with the fault, its former image given back (``image_ref``, and the image's fields in
    its request and system metadata), the event recorded and the action closed. False,
    doing nothing, once the rebuild has left ``rebuilding``."""

    def work(session: Session) -> bool:
        instance = get_instance(session, instance_uuid, lock=True)
        if instance.deleted or instance.task_state != TaskState.REBUILDING:
            return False
        instance.vm_state, instance.task_state = VmState.ERROR, None
        try:
            image = images.find_image(session, orig_image_ref)
        except NovaqError:  # purged meanwhile: only its id can be given back
            instance.image_ref = orig_image_ref
        else:
            instance.image_ref = image.id
            instance.system_metadata = with_image_metadata(instance, image)
            instance.request_spec = with_image_request(instance, image)
        instance.updated_at = utcnow()
        actions.add_fault(session, instance_uuid, exc, None)
        actions.record_event(session, instance_uuid, request_id, SCHEDULE_EVENT, None, exc)
        return True

    return retry_on_conflict(sessions, work)


def with_image_metadata(instance: Instance, image: Image) -> dict[str, Any]:
    """Nova's ``_reset_image_metadata``: the system metadata with the former image's
    ``image_*`` keys out and ``image``'s in."""
    kept = {k: v for k, v in (instance.system_metadata or {}).items() if not k.startswith("image_")}
    return {**kept, **images.system_metadata(image, instance.flavor)}


def with_image_request(instance: Instance, image: Image) -> dict[str, Any]:
    """The boot request with ``image`` (what the scheduler's image filters read)."""
    return dict(
        instance.request_spec or {},
        image=image.id,
        image_name=image.name,
        image_properties={k: str(v) for k, v in (image.properties or {}).items()},
    )


def abort_rebuild(
    sessions: Sessions, instance_uuid: str, request_id: str, host: str, exc: BaseException
) -> bool:
    """The errback's undo of a rebuild step that failed outside its own handling: ERROR,
    task None, a fault, while the instance is still being rebuilt."""
    return abort(sessions, REBUILD, instance_uuid, request_id, host, exc)


def cas_rebuilding(session: Session, instance_uuid: str, **values: Any) -> None:
    """The API's compare-and-swap into ``rebuilding`` (Nova: ``expected_task_state=[None]``)."""
    cas_update(
        session,
        instance_uuid,
        expected_task_state=[None],
        task_state=TaskState.REBUILDING,
        **values,
    )
