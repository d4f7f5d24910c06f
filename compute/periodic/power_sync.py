"""Nova's ``_sync_power_states`` (NOVA_BEHAVIOUR.md §7.2): the hypervisor's power
states against the database's (``running_deleted`` has the other hypervisor-versus-database
pass, ``_cleanup_running_deleted_instances``).

``sync_power_states``: for every instance of this host with no task in flight, the
guest's power state (NOSTATE for a guest the hypervisor lacks) is written to
``power_state`` and the vm_state is reconciled with it by Nova's table:

==============================  =====================================  ====================
vm_state                        guest's power state                    action
==============================  =====================================  ====================
active                          SHUTDOWN, CRASHED                      ``api.stop``
active                          SUSPENDED                              ``api.stop``
active                          PAUSED, NOSTATE                        warning only
stopped                         not NOSTATE / SHUTDOWN / CRASHED       ``api.force_stop``
paused                          SHUTDOWN, CRASHED                      ``api.force_stop``
soft-delete, deleted            not NOSTATE / SHUTDOWN                 warning only
building, rescued, resized,     anything                               nothing
suspended, error
==============================  =====================================  ====================

The stop goes through the public API (``ctx.request``) as Nova's goes through
``compute_api.stop``: an action ``stop`` is recorded, the task_state moves to
``powering-off`` by compare-and-swap, and the host step powers off and sets STOPPED.
``force_stop`` is Nova's: the same, without the vm_state and lock checks (it still
needs no task in flight). Before acting, the instance is read again and its power_state
written by a compare-and-swap expecting task None and the vm_state just read, so a
request that started meanwhile wins, as Nova's ``refresh`` + task check make it win. The
first check is a reader's transaction; when it already shows the guest's power state and
the table says in step (every boot's Started event), there is nothing to write or ask and
the read again is skipped.

Instances are synced by a pool of ``sync_power_state_pool_size`` threads, as Nova's
green pool. That is safe here: libvirt connections are thread-safe (libvirt >= 0.6, the
test driver serialises on its own driver lock, libvirt-python releases the GIL around
each call and errors are per thread), ``virt.libvirt.host.Host`` opens its one
connection under a lock, the simulated host locks per guest, and every thread opens its
own database session. ``tests/unit/compute/periodic/test_power_sync.py`` runs the pool
on a real ``test:///`` node.

Deliberate difference from Nova: there is no ``shutdown_terminate`` column, so an
instance that shut down by itself is always stopped, never deleted.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from compute.instance_state import cas_update, get_instance
from compute.lifecycle import guest_power_state
from compute.periodic import PeriodicContext
from compute.states import VmState
from models import Instance
from models.tables import table_of
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from virt import power_state

LOG = logging.getLogger(__name__)

# What the sync does about one instance (the keys of its summary).
STOP, FORCE_STOP = "stop", "force_stop"
WARN_PAUSED, WARN_MISSING, WARN_DELETED = "warn_paused", "warn_missing", "warn_deleted"
IN_SYNC, PENDING_TASK, MOVED, GONE, FAILED = "in_sync", "pending_task", "moved", "gone", "failed"
OUTCOMES = (
    STOP,
    FORCE_STOP,
    WARN_PAUSED,
    WARN_MISSING,
    WARN_DELETED,
    IN_SYNC,
    PENDING_TASK,
    MOVED,
    GONE,
    FAILED,
)

DELETED_OK = (power_state.NOSTATE, power_state.SHUTDOWN)
IGNORED_VM_STATES = (
    VmState.BUILDING,
    VmState.RESCUED,
    VmState.RESIZED,
    VmState.SUSPENDED,
    VmState.ERROR,
)


#: vm ACTIVE: Nova's action for each guest power state (RUNNING is in step).
ACTIVE_RULES: dict[int, str] = {
    power_state.SHUTDOWN: STOP,
    power_state.CRASHED: STOP,
    power_state.SUSPENDED: STOP,
    power_state.PAUSED: WARN_PAUSED,
    power_state.NOSTATE: WARN_MISSING,
}


def decide(vm_state: str, vm_power_state: int) -> str:
    """Nova's ``_sync_instance_power_state`` table: what to do about an instance in
    ``vm_state`` whose guest is in ``vm_power_state`` (one of the module's outcomes).
    ``IGNORED_VM_STATES`` are always in step."""
    if vm_state == VmState.ACTIVE:
        return ACTIVE_RULES.get(vm_power_state, IN_SYNC)
    if vm_state == VmState.STOPPED and vm_power_state not in power_state.NOT_RUNNING:
        return FORCE_STOP
    if vm_state == VmState.PAUSED and vm_power_state in power_state.OFF:
        return FORCE_STOP
    if vm_state in (VmState.SOFT_DELETED, VmState.DELETED) and vm_power_state not in DELETED_OK:
        return WARN_DELETED
    return IN_SYNC


# -- _sync_power_states ---------------------------------------------------------------------


def sync_power_states(ctx: PeriodicContext) -> dict[str, Any]:
    """One pass of Nova's ``_sync_power_states`` on ``ctx.host``."""
    with ctx.sessions() as session:
        uuids = _instances_of(session, ctx.host)
    guests = ctx.hypervisor.list_instance_uuids()
    if len(guests) != len(uuids):
        LOG.warning(
            "While synchronizing instance power states, found %(num_db_instances)s "
            "instances in the database and %(num_vm_instances)s instances on the "
            "hypervisor (host %(host)s).",
            {"num_db_instances": len(uuids), "num_vm_instances": len(guests), "host": ctx.host},
        )
    workers = max(1, ctx.settings.sync_power_state_pool_size)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="power-sync") as pool:
        results = list(pool.map(lambda uuid: _sync_safely(ctx, uuid), uuids))
    by_outcome: dict[str, list[str]] = {name: [] for name in OUTCOMES}
    updated = []
    for uuid, result in zip(uuids, results, strict=True):
        by_outcome[result.outcome].append(uuid)
        if result.power_updated:
            updated.append(uuid)
    return {
        "db_instances": len(uuids),
        "hypervisor_instances": len(guests),
        "power_state_updated": updated,
        **by_outcome,
    }


@dataclass(frozen=True, slots=True)
class _Synced:
    outcome: str
    power_updated: bool = False


def _instances_of(session: Session, host: str) -> list[str]:
    """Every instance row of ``host`` that is not deleted (Nova's ``get_by_host``: the
    SOFT_DELETED ones are among them)."""
    return list(
        session.scalars(
            select(Instance.uuid)
            .where(Instance.host == host, Instance.deleted == 0)
            .order_by(Instance.id)
        )
    )


def _sync_safely(ctx: PeriodicContext, uuid: str) -> _Synced:
    try:
        return _sync_one(ctx, uuid)
    except Exception:  # noqa: BLE001 - one instance must not end the pass (as Nova)
        LOG.exception(
            "Periodic sync_power_state task had an error while processing instance %s on %s.",
            uuid,
            ctx.host,
        )
        return _Synced(FAILED)


def sync_instance(ctx: PeriodicContext, uuid: str) -> str:
    """Nova's ``_sync_instance_power_state`` for one instance, as the pass does it (the
    lifecycle-event handler's entry); returns the outcome."""
    return _sync_safely(ctx, uuid).outcome


def _sync_one(ctx: PeriodicContext, uuid: str) -> _Synced:
    """Nova's ``_query_driver_power_state_and_sync`` for one instance."""
    seen = _first_look(ctx, uuid)
    if isinstance(seen, str):
        return _Synced(seen)
    vm_power_state = guest_power_state(ctx.hypervisor, uuid)
    if vm_power_state == seen.power_state and decide(seen.vm_state, vm_power_state) == IN_SYNC:
        # NOTE: in step as first read, nothing to write nor to ask: Nova's ``refresh`` would
        # only find the same or, had a request begun since, leave the instance alone too.
        # A later change of the guest makes an event (or the next pass) of its own.
        return _Synced(IN_SYNC)
    try:
        vm_state, updated = _record_power_state(ctx, uuid, vm_power_state)
    except InstanceNotFound:
        return _Synced(GONE)  # deleted meanwhile: nothing left to sync (Nova ignores it)
    except _Skip as skip:
        return _Synced(skip.outcome)
    outcome = decide(vm_state, vm_power_state)
    if outcome in (STOP, FORCE_STOP):
        outcome = _stop(ctx, uuid, outcome, vm_state, vm_power_state)
    else:
        _log(outcome, uuid, ctx.host)
    return _Synced(outcome, updated)


@dataclass(frozen=True, slots=True)
class _Seen:
    """The instance's states as the first look read them."""

    vm_state: str
    power_state: int


#: The first look's columns of a live instance (``:uuid``).
_INSTANCES = table_of(Instance)
#: On the table's columns: the same SQL without the ORM's compile state and result.
_FIRST_LOOK = select(
    _INSTANCES.c.task_state, _INSTANCES.c.host, _INSTANCES.c.vm_state, _INSTANCES.c.power_state
).where(_INSTANCES.c.uuid == bindparam("uuid"), _INSTANCES.c.deleted == 0)


def _first_look(ctx: PeriodicContext, uuid: str) -> _Seen | str:
    """Nova's task check before the hypervisor is asked: the outcome when the instance is
    gone, busy with a task or on another host, else its states.

    NOTE: a reader's transaction reading four columns: on SQLite a writer's takes the
    database's write lock at its BEGIN, and every boot's Started event comes here while
    the build's own transactions want that lock."""
    with ctx.sessions(read_only=True) as session:
        row = session.execute(_FIRST_LOOK, {"uuid": uuid}).first()
    if row is None:
        return GONE
    task_state, host, vm_state, db_power_state = row
    if task_state is not None:
        LOG.info(
            "During sync_power_state the instance %s has a pending task (%s). Skip.",
            uuid,
            task_state,
        )
        return PENDING_TASK
    if host != ctx.host:
        _log_moved(uuid, ctx.host, host)
        return MOVED
    return _Seen(vm_state, db_power_state)


class _Skip(Exception):
    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


def _record_power_state(ctx: PeriodicContext, uuid: str, vm_power_state: int) -> tuple[str, bool]:
    """Nova's ``refresh`` then ``power_state`` ← the hypervisor's. The write is a
    compare-and-swap on task None and the vm_state read, so a request that began since
    the first check wins (``_Skip``). Returns (vm_state, whether power_state changed)."""
    with ctx.sessions() as session:
        instance = get_instance(session, uuid, with_deleted=False)
        if instance.host != ctx.host:
            _log_moved(uuid, ctx.host, instance.host)
            raise _Skip(MOVED)
        if instance.task_state is not None:
            LOG.info(
                "During sync_power_state the instance %s has a pending task (%s). Skip.",
                uuid,
                instance.task_state,
            )
            raise _Skip(PENDING_TASK)
        vm_state, db_power_state = instance.vm_state, instance.power_state
        if vm_power_state == db_power_state:
            return vm_state, False
        LOG.info(
            "During _sync_instance_power_state the DB power_state (%s) does not match the "
            "vm_power_state from the hypervisor (%s) for instance %s. Updating power_state "
            "in the DB to match the hypervisor.",
            db_power_state,
            vm_power_state,
            uuid,
        )
        try:
            cas_update(
                session,
                uuid,
                expected_task_state=[None],
                expected_vm_state=[vm_state],
                power_state=vm_power_state,
            )
        except UnexpectedTaskStateError:
            raise _Skip(PENDING_TASK) from None
        return vm_state, True


def _log_moved(uuid: str, host: str, now_on: str | None) -> None:
    LOG.info(
        "During the sync_power process the instance %s has moved from host %s to host %s",
        uuid,
        host,
        now_on,
    )


def _stop(ctx: PeriodicContext, uuid: str, how: str, vm_state: str, vm_power_state: int) -> str:
    """Stop through the API, as Nova calls ``compute_api.stop`` / ``force_stop``: asked of
    the task wrapper, which sends it once the pass is done. A refusal (a request won the
    race, the server is locked, the host looks down) is logged and the next pass tries
    again, as Nova's."""
    LOG.warning(
        "Instance %s on %s: %s Current vm_state: %s, current VM power_state: %s",
        uuid,
        ctx.host,
        _reason(vm_state, vm_power_state),
        vm_state,
        power_state.NAMES.get(vm_power_state, str(vm_power_state)),
    )
    action = "stop" if how == STOP else "force_stop"
    return ctx.request(
        action, uuid, how, "error during stop() in sync_power_state for instance %s."
    )


def _reason(vm_state: str, vm_power_state: int) -> str:
    """Nova's warning for each stopping row of the table."""
    if vm_state == VmState.STOPPED:
        return "Instance is not stopped. Calling the stop API."
    if vm_state == VmState.PAUSED:
        return "Paused instance shutdown by itself. Calling the stop API."
    if vm_power_state == power_state.SUSPENDED:
        return "Instance is suspended unexpectedly. Calling the stop API."
    return "Instance shutdown by itself. Calling the stop API."


def _log(outcome: str, uuid: str, host: str) -> None:
    message = {
        WARN_PAUSED: "Instance %s on %s is paused unexpectedly. Ignore.",
        WARN_MISSING: "Instance %s on %s is unexpectedly not found. Ignore.",
        WARN_DELETED: "Instance %s on %s is not (soft-)deleted.",
    }.get(outcome)
    if message is not None:
        LOG.warning(message, uuid, host)
