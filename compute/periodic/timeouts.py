"""The threshold passes of a compute host (NOVA_BEHAVIOUR.md §7.2): Nova's
``_check_instance_build_time``, ``_poll_rebooting_instances``, ``_poll_rescued_instances``,
``_poll_unconfirmed_resizes``, ``_poll_shelved_instances`` and ``_reclaim_queued_deletes``.
Each finds what has waited in one state on this host longer than its option allows and
moves it on, returning what it acted on.

One instance's failure is logged and the pass goes on with the others; the next run tries
it again (as Nova's resize and shelve passes do; an error ended Nova's rescue pass). Each
change re-checks its candidate under the row lock, so a request that moved the instance
on since the query wins. Rescue and resize go through the public API as Nova's do
(``ctx.api``); the others act on the host itself, as Nova's do.

Where novaq deliberately differs from Nova:

- A timed-out build is errored out as every failed build in novaq is
  (``compute.build.fail_build``): claim released, task cleared, host and node nulled, a
  fault. Nova only sets ERROR and the allocation stays until the server is deleted.
- A stuck soft reboot is finished (ACTIVE, or rebooted hard): Nova's libvirt driver
  does nothing in ``poll_rebooting_instances``, leaving the server in REBOOT.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute import lifecycle, shelve, soft_delete
from compute.build import destroy_quietly, fail_build
from compute.claims import release_in_session, retry_on_conflict
from compute.instance_state import cas_update, get_instance
from compute.periodic import PeriodicContext
from compute.states import TaskState, VmState
from models import Instance, Migration, utcnow
from models.db import session_scope
from novaq.exceptions import (
    BuildAbortError,
    InstanceNotFound,
    UnexpectedTaskStateError,
)
from virt import power_state

LOG = logging.getLogger(__name__)

SOFT_REBOOT_TASKS = (TaskState.REBOOTING, TaskState.REBOOT_PENDING, TaskState.REBOOT_STARTED)
#: Events named as Nova's ``wrap_instance_event(prefix="compute")`` names a method's.
BUILD_TIMEOUT_EVENT = "compute__check_instance_build_time"
REBOOT_POLL_EVENT = "compute__poll_rebooting_instances"
#: The request id of an event on a server that has no action at all (rows made by hand).
PERIODIC_REQUEST = "req-periodic"
#: What the passes report, each a list of uuids (migration uuids for resizes).
ERRORED, FINISHED, REBOOTED_HARD, UNRESCUED = "errored", "finished", "rebooted_hard", "unrescued"
CONFIRMING, SKIPPED, OFFLOADED, FAILED = "confirming", "skipped", "offloaded", "failed"


# -- helpers -------------------------------------------------------------------------------


def _cutoff(seconds: int) -> dt.datetime:
    """Naive UTC, as the columns are: what changed before this is past the threshold."""
    return utcnow() - dt.timedelta(seconds=seconds)


def _instances(ctx: PeriodicContext, *where: Any) -> list[str]:
    """The uuids of this host's live instances matching ``where``, oldest first."""
    with session_scope(ctx.db_url) as session:
        query = select(Instance.uuid).where(Instance.host == ctx.host, Instance.deleted == 0)
        return list(session.scalars(query.where(*where).order_by(Instance.id)))


def _latest_request_id(session: Session, instance_uuid: str) -> str:
    return actions.latest_request_id(session, instance_uuid) or PERIODIC_REQUEST


def _locked_here(session: Session, ctx: PeriodicContext, uuid: str) -> Instance | None:
    """The instance under its row lock, if it still lives on this host."""
    try:
        instance = get_instance(session, uuid, lock=True)
    except InstanceNotFound:
        return None
    if instance.deleted or instance.host != ctx.host:
        return None
    return instance


def _each(
    uuids: list[str], outcomes: tuple[str, ...], host: str, act: Callable[[str], str | None]
) -> dict[str, list[str]]:
    """Run ``act`` on each uuid; the uuids by the outcome it returned (None: nothing was
    done), and under ``failed`` those it raised for (logged)."""
    summary: dict[str, list[str]] = {key: [] for key in (*outcomes, FAILED)}
    for uuid in uuids:
        try:
            outcome = act(uuid)
        except Exception:  # noqa: BLE001 - the next run tries again, the others go on
            LOG.exception("Periodic pass on %s failed for %s", host, uuid)
            outcome = FAILED
        if outcome is not None:
            summary[outcome].append(uuid)
    return summary


# -- _check_instance_build_time -------------------------------------------------------------


def check_instance_build_time(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_check_instance_build_time``: this host's instances still BUILDING more
    than ``instance_build_timeout`` seconds after they were created go to ERROR.

    Every BUILDING instance with this host counts, whatever its task: ``spawning`` (a
    spawn that hangs) as well as ``scheduling`` (the scheduler chose and claimed this host
    but the build message never ran), as Nova's filter is only vm_state and host.

    Deliberate difference (see the module docstring): the build is errored out by
    ``fail_build``, novaq's one undo of a build: claim and PCI devices released, task
    cleared, host/node nulled, a fault and a ``compute__check_instance_build_time`` Error
    event on the create action. Nova leaves the task, the host and the allocation and
    records no fault; an ERROR server that holds a claim for a guest that never ran would
    leak capacity until deleted. Then any guest the build left here is destroyed; a spawn
    still running finds the state moved on and takes its own guest down.
    """
    timeout = ctx.settings.instance_build_timeout
    if timeout <= 0:
        return {ERRORED: [], FAILED: []}
    due = _instances(
        ctx, Instance.vm_state == VmState.BUILDING, Instance.created_at < _cutoff(timeout)
    )
    return _each(due, (ERRORED,), ctx.host, lambda uuid: _time_out_build(ctx, uuid, timeout))


def _time_out_build(ctx: PeriodicContext, uuid: str, timeout: int) -> str | None:
    with session_scope(ctx.db_url) as session:
        request_id = _latest_request_id(session, uuid)
    error = BuildAbortError(uuid=uuid, reason=f"build timed out after {timeout} s")
    # NOTE: fail_build re-checks BUILDING under the row lock: a build that finished since
    # the query is left alone (False), and its guest with it.
    if not fail_build(
        ctx.db_url, uuid, request_id, error, host=ctx.host, event=BUILD_TIMEOUT_EVENT
    ):
        return None
    LOG.warning("Instance %s on %s: build timed out. Set to error state.", uuid, ctx.host)
    destroy_quietly(ctx.hypervisor, uuid)
    return ERRORED


# -- _poll_rebooting_instances --------------------------------------------------------------


def poll_rebooting_instances(ctx: PeriodicContext) -> dict[str, Any]:
    """Soft reboots of this host stuck longer than ``reboot_timeout`` (their ``updated_at``,
    as Nova's ``instance_get_all_hung_in_rebooting``) are finished. Nova hands them to the
    driver, and libvirt's does nothing; novaq does better:

    - guest running: the reboot happened (or did not matter): ACTIVE (RESCUED stays
      RESCUED, as a reboot leaves it), task None, compare-and-swap from the soft-reboot
      task_states, and a ``compute__poll_rebooting_instances`` event on the reboot action;
    - guest not running: the same event, task ``rebooting_hard`` (what a hard reboot
      request sets), then ``compute.lifecycle.reboot_instance(hard=True)``: the driver's
      hard reboot, ACTIVE, its ``compute_reboot_instance`` event; if that fails too the
      server goes to ERROR with a fault, as any failed reboot that leaves no guest running.
    """
    timeout = ctx.settings.reboot_timeout
    if timeout <= 0:
        return {FINISHED: [], REBOOTED_HARD: [], FAILED: []}
    cutoff = _cutoff(timeout)
    due = _instances(ctx, Instance.task_state.in_(SOFT_REBOOT_TASKS), Instance.updated_at < cutoff)
    return _each(
        due, (FINISHED, REBOOTED_HARD), ctx.host, lambda uuid: _end_reboot(ctx, uuid, cutoff)
    )


def _end_reboot(ctx: PeriodicContext, uuid: str, cutoff: dt.datetime) -> str | None:
    if lifecycle.guest_power_state(ctx.hypervisor, uuid) == power_state.RUNNING:
        if _take_stuck_reboot(ctx, uuid, cutoff, _rebooted) is None:
            return None
        LOG.info("Instance %s on %s: stuck reboot finished, guest running", uuid, ctx.host)
        return FINISHED
    request_id = _take_stuck_reboot(
        ctx, uuid, cutoff, lambda _: {"task_state": TaskState.REBOOTING_HARD}, finish=False
    )
    if request_id is None:
        return None
    LOG.warning(
        "Instance %s on %s: stuck reboot, guest not running: rebooting hard", uuid, ctx.host
    )
    outcome = lifecycle.reboot_instance(
        ctx.db_url, ctx.hypervisor, uuid, request_id, ctx.host, hard=True
    )
    return REBOOTED_HARD if outcome == lifecycle.DONE else None


def _rebooted(instance: Instance) -> dict[str, Any]:
    vm_state = VmState.RESCUED if instance.vm_state == VmState.RESCUED else VmState.ACTIVE
    return {"vm_state": vm_state, "task_state": None, "power_state": power_state.RUNNING}


def _take_stuck_reboot(
    ctx: PeriodicContext,
    uuid: str,
    cutoff: dt.datetime,
    values: Callable[[Instance], dict[str, Any]],
    finish: bool = True,
) -> str | None:
    """Under the row lock, if the soft reboot is still stuck: the compare-and-swap to
    ``values`` and the event. The reboot action's request id, or None if it moved on."""
    with session_scope(ctx.db_url) as session:
        instance = _locked_here(session, ctx, uuid)
        if instance is None or instance.task_state not in SOFT_REBOOT_TASKS:
            return None
        if instance.updated_at is None or instance.updated_at >= cutoff:
            return None  # the reboot made progress since the query
        cas_update(session, uuid, expected_task_state=SOFT_REBOOT_TASKS, **values(instance))
        request_id = _latest_request_id(session, uuid)
        actions.record_event(
            session, uuid, request_id, REBOOT_POLL_EVENT, ctx.host, finish_action=finish
        )
        return request_id


# -- _poll_rescued_instances ----------------------------------------------------------------


def poll_rescued_instances(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_poll_rescued_instances``: servers of this host RESCUED for longer than
    ``rescue_timeout`` are unrescued through the API (``api.unrescue``: gate, action
    ``unrescue``, the host step), as Nova calls ``compute_api.unrescue``.

    "Rescued for" is measured from ``launched_at``, as in Nova: novaq's rescue stamps it,
    as Nova's ``rescue_instance`` resets it. Only servers with no task in flight are
    candidates (the API would refuse the others; Nova's pass then stopped on the error).
    A refusal (a locked server, a host the API sees down) is logged and retried next run.
    """
    timeout = ctx.settings.rescue_timeout
    if timeout <= 0:
        return {UNRESCUED: [], FAILED: []}
    due = _instances(
        ctx,
        Instance.vm_state == VmState.RESCUED,
        Instance.task_state.is_(None),
        Instance.launched_at < _cutoff(timeout),
    )

    def unrescue(uuid: str) -> str:
        LOG.info("Instance %s on %s: rescued past rescue_timeout, unrescuing", uuid, ctx.host)
        ctx.api.unrescue(uuid)
        return UNRESCUED

    return _each(due, (UNRESCUED,), ctx.host, unrescue)


# -- _poll_unconfirmed_resizes --------------------------------------------------------------


def poll_unconfirmed_resizes(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_poll_unconfirmed_resizes``: the ``finished`` migrations whose destination
    is this host and whose ``updated_at`` is older than ``resize_confirm_window`` are
    confirmed through the API (``api.confirm_resize``: action ``confirmResize``, the
    source step), unless the instance says otherwise:

    - missing or deleted, ERROR, or in any other state than RESIZED with no task: the
      migration goes to ``error`` (for a missing instance, what the migration still holds
      on the source is released too: no server is left to free it; for the others, as
      Nova, the migration keeps it and the server's own cleanup frees it);
    - task ``deleting``/``soft-deleting`` (the delete confirms it) or ``resize_finish``
      (the migration was saved before the instance): skipped.

    A failed confirm (the API refuses, the broker is down) is logged and retried next run.
    """
    window = ctx.settings.resize_confirm_window
    if window <= 0:
        return {CONFIRMING: [], SKIPPED: [], ERRORED: [], FAILED: []}
    with session_scope(ctx.db_url) as session:
        due = session.execute(
            select(Migration.uuid, Migration.instance_uuid)
            .where(
                Migration.status == "finished",
                Migration.dest_compute == ctx.host,
                Migration.updated_at < _cutoff(window),
            )
            .order_by(Migration.id)
        ).all()
    if due:
        LOG.info("Found %d unconfirmed migrations older than %d seconds", len(due), window)
    instance_of = {migration: instance for migration, instance in due}
    return _each(
        list(instance_of),
        (CONFIRMING, SKIPPED, ERRORED),
        ctx.host,
        lambda migration: _auto_confirm(ctx, migration, instance_of[migration]),
    )


def _auto_confirm(ctx: PeriodicContext, migration_uuid: str, instance_uuid: str) -> str:
    LOG.info("Automatically confirming migration %s for instance %s", migration_uuid, instance_uuid)
    try:
        verdict = retry_on_conflict(
            ctx.db_url, lambda session: _judge(session, migration_uuid, instance_uuid)
        )
        if verdict != CONFIRMING:
            return verdict
        ctx.api.confirm_resize(instance_uuid)
    except Exception as exc:  # noqa: BLE001 - Nova: "Will retry later."
        LOG.info(
            "Error auto-confirming resize of instance %s: %s. Will retry later.",
            instance_uuid,
            exc,
        )
        return FAILED
    return CONFIRMING


def _judge(session: Session, migration_uuid: str, instance_uuid: str) -> str:
    """Nova's checks, in Nova's order; errors the migration out where Nova does."""
    instance = session.scalars(select(Instance).where(Instance.uuid == instance_uuid)).first()
    if instance is None or instance.deleted:
        return _error_migration(
            session, migration_uuid, f"Instance {instance_uuid} not found", release=True
        )
    if instance.vm_state == VmState.ERROR:
        return _error_migration(session, migration_uuid, "In ERROR state")
    if instance.task_state in (TaskState.DELETING, TaskState.SOFT_DELETING):
        LOG.debug("Instance %s being deleted during resize confirmation. Skipping.", instance_uuid)
        return SKIPPED
    if instance.task_state == TaskState.RESIZE_FINISH:
        LOG.debug("Instance %s still resizing during resize confirmation. Skipping.", instance_uuid)
        return SKIPPED
    if instance.vm_state != VmState.RESIZED or instance.task_state is not None:
        reason = f"In states {instance.vm_state}/{instance.task_state}, not RESIZED/None"
        return _error_migration(session, migration_uuid, reason)
    return CONFIRMING


def _error_migration(
    session: Session, migration_uuid: str, reason: str, release: bool = False
) -> str:
    moved = session.execute(
        update(Migration)
        .where(Migration.uuid == migration_uuid, Migration.status == "finished")
        .values(status="error", updated_at=utcnow())
        .execution_options(synchronize_session=False)
    ).rowcount  # type: ignore[attr-defined]
    if not moved:
        return SKIPPED  # confirmed or reverted since the query
    if release:
        release_in_session(session, migration_uuid)
    LOG.warning("Setting migration %s to error: %s", migration_uuid, reason)
    return ERRORED


# -- _poll_shelved_instances ----------------------------------------------------------------


def poll_shelved_instances(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_poll_shelved_instances``: servers SHELVED on this host (task None) whose
    system_metadata ``shelved_at`` is older than ``shelved_offload_time`` (> 0; 0 means
    shelve already offloaded, < 0 never offload) are offloaded as Nova does it: task
    ``shelving_offloading`` by compare-and-swap from None, then the host's own offload
    (``compute.shelve.shelve_offload_instance``: guest destroyed, claim released,
    SHELVED_OFFLOADED with no host). Like Nova's, it runs here, not through
    ``api.shelve_offload``: the API's gate would refuse a locked server, which Nova's pass
    offloads, and the step would only come back to this host. Its
    ``compute_shelve_offload_instance`` event goes on the latest action (the shelve), as
    Nova's context fallback puts it.

    A server without a readable ``shelved_at`` is skipped with a warning (Nova's pass
    failed on it). An offload that fails is left as the offload leaves it (task None, a
    fault) and tried again next run.
    """
    offload_time = ctx.settings.shelved_offload_time
    if offload_time <= 0:
        return {OFFLOADED: [], FAILED: []}
    cutoff = _cutoff(offload_time)
    with session_scope(ctx.db_url) as session:
        shelved = session.execute(
            select(Instance.uuid, Instance.system_metadata)
            .where(
                Instance.host == ctx.host,
                Instance.deleted == 0,
                Instance.vm_state == VmState.SHELVED,
                Instance.task_state.is_(None),
            )
            .order_by(Instance.id)
        ).all()
    due = [uuid for uuid, meta in shelved if _shelved_before(uuid, meta, cutoff)]
    return _each(due, (OFFLOADED,), ctx.host, lambda uuid: _offload(ctx, uuid, cutoff))


def _shelved_at(uuid: str, meta: dict[str, Any] | None) -> dt.datetime | None:
    value = (meta or {}).get("shelved_at")
    try:
        shelved_at = dt.datetime.fromisoformat(str(value))
    except ValueError:
        LOG.warning("Instance %s: shelved_at %r unreadable; not offloaded", uuid, value)
        return None
    if shelved_at.tzinfo is not None:
        shelved_at = shelved_at.astimezone(dt.UTC).replace(tzinfo=None)
    return shelved_at


def _shelved_before(uuid: str, meta: dict[str, Any] | None, cutoff: dt.datetime) -> bool:
    shelved_at = _shelved_at(uuid, meta)
    return shelved_at is not None and shelved_at < cutoff


def _offload(ctx: PeriodicContext, uuid: str, cutoff: dt.datetime) -> str | None:
    try:
        with session_scope(ctx.db_url) as session:
            instance = _locked_here(session, ctx, uuid)
            if instance is None or not _shelved_before(uuid, instance.system_metadata, cutoff):
                return None  # unshelved (and perhaps shelved again) since the query
            cas_update(
                session,
                uuid,
                expected_task_state=[None],
                expected_vm_state=[VmState.SHELVED],
                task_state=TaskState.SHELVING_OFFLOADING,
            )
            request_id = _latest_request_id(session, uuid)
    except UnexpectedTaskStateError:
        return None
    LOG.info("Instance %s on %s: shelved past shelved_offload_time, offloading", uuid, ctx.host)
    outcome = shelve.shelve_offload_instance(ctx.db_url, ctx.hypervisor, uuid, request_id, ctx.host)
    return OFFLOADED if outcome == lifecycle.DONE else None


# -- _reclaim_queued_deletes ----------------------------------------------------------------


def reclaim_queued_deletes(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_reclaim_queued_deletes``: this host's servers SOFT_DELETED (task None)
    longer than ``reclaim_instance_interval`` are deleted for good
    (``compute.soft_delete.reclaim_queued_deletes`` does the work)."""
    reclaimed = soft_delete.reclaim_queued_deletes(
        ctx.db_url, ctx.hypervisor, ctx.host, ctx.settings
    )
    return {"reclaimed": reclaimed}
