"""What the threshold passes share (``timeouts``, ``resize_confirm``, ``deferred``):
each finds what has waited in one state on this host longer than its option allows and
moves it on, one instance at a time.

One instance's failure is logged and the pass goes on with the others; the next run tries
it again (as Nova's resize and shelve passes do; an error ended Nova's rescue pass). Each
change re-checks its candidate under the row lock (``locked_here``), so a request that
moved the instance on since the query wins.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.instance_state import get_instance
from compute.periodic import PeriodicContext
from models import Instance, utcnow
from novaq.exceptions import InstanceNotFound

LOG = logging.getLogger(__name__)

#: The request id of an event on a server that has no action at all (rows made by hand).
PERIODIC_REQUEST = "req-periodic"
#: Outcomes more than one pass reports, each a list of uuids.
ERRORED, SKIPPED, FAILED = "errored", "skipped", "failed"


def cutoff_for(seconds: int) -> dt.datetime:
    """Naive UTC, as the columns are: what changed before this is past the threshold."""
    return utcnow() - dt.timedelta(seconds=seconds)


def host_instances(ctx: PeriodicContext, *where: Any) -> list[str]:
    """The uuids of this host's live instances matching ``where``, oldest first."""
    with ctx.sessions() as session:
        query = select(Instance.uuid).where(Instance.host == ctx.host, Instance.deleted == 0)
        return list(session.scalars(query.where(*where).order_by(Instance.id)))


def latest_request_id(session: Session, instance_uuid: str) -> str:
    return actions.latest_request_id(session, instance_uuid) or PERIODIC_REQUEST


def locked_here(session: Session, ctx: PeriodicContext, uuid: str) -> Instance | None:
    """The instance under its row lock, if it still lives on this host."""
    try:
        instance = get_instance(session, uuid, lock=True)
    except InstanceNotFound:
        return None
    if instance.deleted or instance.host != ctx.host:
        return None
    return instance


def each(
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
