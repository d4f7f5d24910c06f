"""``_sync_scheduler_instance_info``: does the scheduler's view of this host match what
the host really runs?

In Nova the compute host sends its instance uuids to the scheduler, which compares them
with the per-host instance lists its ``HostManager`` keeps in memory and reloads the host
from the database on a mismatch (NOVA_BEHAVIOUR.md §4.7). novaq's scheduler keeps no such
list: ``scheduler.candidates.load_candidates`` reads every host's instances from the
database on each request (its only cache, ``_parse_cpu_info``, is keyed by a CPU
description, not by host), so there is nothing in memory to drift or to re-sync.

The same question asked of what novaq has: the guests the hypervisor runs against the
instances the scheduler counts on this host (non-deleted rows with ``host`` = this host).
Every difference is logged, as Nova's "The instance sync for host ... did not match", and
returned with its uuids. Nothing is changed: the tasks that heal are
``_sync_power_states``, ``_cleanup_running_deleted_instances`` and
``update_available_resource``.

- ``missing_guests``: counted by the scheduler on this host, in a state that needs a guest
  (``compute.audit.NEEDS_GUEST``, with no task in flight), but the hypervisor has no
  guest for it. Rows that legitimately have no guest are not reported: building,
  shelved (offloaded), soft-deleted, ERROR without ever having launched, or any state
  while a task runs.
- ``unknown_guests``: the hypervisor runs a guest the scheduler does not count on this
  host (no row, a deleted row, or a row on another host). Guests of a move in flight from
  or to this host are not reported: both ends hold a guest until confirm or revert.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from compute.audit import NEEDS_GUEST
from compute.periodic import PeriodicContext
from compute.usage import TERMINAL_MIGRATION
from models import Instance, Migration

LOG = logging.getLogger(__name__)


def sync_scheduler_instance_info(ctx: PeriodicContext) -> dict[str, Any]:
    guests = set(ctx.hypervisor.list_instance_uuids())
    with ctx.sessions() as session:
        counted = _counted_instances(session, ctx.host)
        missing = sorted(uuid for uuid, needs in counted.items() if needs and uuid not in guests)
        strangers = guests - counted.keys() - _moving_instances(session, ctx.host)
        unknown = {uuid: _why_unknown(session, uuid) for uuid in sorted(strangers)}
    result = {
        "host": ctx.host,
        "guests": len(guests),
        "instances": len(counted),
        "matched": not missing and not unknown,
        "missing_guests": missing,
        "unknown_guests": sorted(unknown),
        "unknown_reasons": unknown,
    }
    _log(result)
    return result


def _counted_instances(session: Session, host: str) -> dict[str, bool]:
    """The instances the scheduler counts on ``host`` (what ``_instances_by_host`` reads),
    each with whether it should have a guest on the hypervisor."""
    rows = session.execute(
        select(Instance.uuid, Instance.vm_state, Instance.task_state, Instance.launched_at).where(
            Instance.host == host, Instance.deleted == 0
        )
    )
    return {row.uuid: _needs_guest(row.vm_state, row.task_state, row.launched_at) for row in rows}


def _needs_guest(vm_state: str, task_state: str | None, launched_at: object) -> bool:
    # NOTE: the audit's rule: a task in flight (spawning, migrating, deleting…) may have
    # removed or not yet created the guest. An ERROR instance that never launched (a build
    # timed out, NOVA_BEHAVIOUR.md §7.2 keeps its host) never had one.
    if vm_state == "error" and launched_at is None:
        return False
    return vm_state in NEEDS_GUEST and task_state is None


def _moving_instances(session: Session, host: str) -> set[str]:
    """Instances of a move in flight with this host at either end."""
    return set(
        session.scalars(
            select(Migration.instance_uuid).where(
                or_(Migration.source_compute == host, Migration.dest_compute == host),
                Migration.status.not_in(TERMINAL_MIGRATION),
                Migration.deleted == 0,
            )
        )
    )


def _why_unknown(session: Session, uuid: str) -> str:
    instance = session.scalars(
        select(Instance).where(Instance.uuid == uuid).order_by(Instance.deleted)
    ).first()
    if instance is None:
        return "no instance with this uuid"
    if instance.deleted:
        return "the instance is deleted"
    if instance.host is None:
        return f"the instance has no host ({instance.vm_state})"
    return f"the instance is on host {instance.host}"


def _log(result: dict[str, Any]) -> None:
    host = result["host"]
    if result["matched"]:
        LOG.debug("Successfully synced instances from host '%s'.", host)
        return
    LOG.warning(
        "The instance sync for host '%s' did not match: instances with no guest %s; "
        "guests the scheduler does not count on this host %s.",
        host,
        _listed(result["missing_guests"]),
        _listed(result["unknown_guests"]),
    )


def _listed(uuids: Collection[str]) -> str:
    return "[" + ", ".join(uuids) + "]" if uuids else "none"
