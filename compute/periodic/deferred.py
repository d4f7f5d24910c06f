"""The work a compute host does later on purpose (NOVA_BEHAVIOUR.md §7.2): Nova's
``_poll_shelved_instances`` (offload what stayed shelved past ``shelved_offload_time``)
and ``_reclaim_queued_deletes`` (delete for good what stayed soft-deleted past
``reclaim_instance_interval``). ``compute.periodic.passes`` has the rules the threshold
passes share."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sqlalchemy import select

from compute import lifecycle, shelve, soft_delete
from compute.instance_state import cas_update
from compute.periodic import PeriodicContext
from compute.periodic.passes import (
    FAILED,
    cutoff_for,
    each,
    latest_request_id,
    locked_here,
)
from compute.states import TaskState, VmState
from compute.steps import StepContext
from models import Instance
from novaq.exceptions import UnexpectedTaskStateError

LOG = logging.getLogger(__name__)

OFFLOADED = "offloaded"


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
    cutoff = cutoff_for(offload_time)
    with ctx.sessions() as session:
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
    return each(due, (OFFLOADED,), ctx.host, lambda uuid: _offload(ctx, uuid, cutoff))


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
        with ctx.sessions() as session:
            instance = locked_here(session, ctx, uuid)
            if instance is None or not _shelved_before(uuid, instance.system_metadata, cutoff):
                return None  # unshelved (and perhaps shelved again) since the query
            cas_update(
                session,
                uuid,
                expected_task_state=[None],
                expected_vm_state=[VmState.SHELVED],
                task_state=TaskState.SHELVING_OFFLOADING,
            )
            request_id = latest_request_id(session, uuid)
    except UnexpectedTaskStateError:
        return None
    LOG.info("Instance %s on %s: shelved past shelved_offload_time, offloading", uuid, ctx.host)
    step = StepContext(ctx.sessions, ctx.hypervisor, ctx.host, request_id)
    outcome = shelve.shelve_offload_instance(step, uuid)
    return OFFLOADED if outcome == lifecycle.DONE else None


def reclaim_queued_deletes(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_reclaim_queued_deletes``: this host's servers SOFT_DELETED (task None)
    longer than ``reclaim_instance_interval`` are deleted for good
    (``compute.soft_delete.reclaim_queued_deletes`` does the work)."""
    reclaimed = soft_delete.reclaim_queued_deletes(
        ctx.sessions, ctx.hypervisor, ctx.host, ctx.settings
    )
    return {"reclaimed": reclaimed}
