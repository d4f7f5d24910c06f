"""Host discovery: map compute hosts to the cell (Nova's ``nova-manage cell_v2
discover_hosts`` and the scheduler's ``_discover_hosts_in_cells`` periodic task).

novaq has one cell, ``cell1``. Every compute service (``novaq-compute``, not deleted)
without a ``host_mappings`` row gets one, and the compute nodes of mapped hosts get
``mapped = 1``, in one transaction. Running it again maps nothing new; two runs at once
cannot map a host twice: ``host_mappings.host`` is unique, so the run that loses the
insert skips that host (each insert is its own savepoint), and only the run that inserted
a host reports it.

Where novaq differs from Nova, and why:

- Nova's scheduler refuses hosts without a mapping (they are not in any cell, so it cannot
  reach them). novaq does not gate scheduling on mappings: it has a single database and a
  single cell, so an unmapped host is as reachable as a mapped one, and a fresh cluster
  schedules without an operator step. The mapping is bookkeeping kept for parity.
- Nova's leader rule: with several schedulers, only the alphabetically first scheduler
  that is up does the periodic pass. In novaq the periodic pass is one message on the
  ``maintenance`` queue, which exactly one scheduler worker takes, and the periodic lease
  (``compute/periodic/runs.py``) forbids two overlapping runs: one scheduler acts per
  run by construction. The leader is still computed and returned, next to the host that
  acted, so an operator can see both.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from compute.periodic import PeriodicContext
from compute.servicegroup import COMPUTE, SCHEDULER, is_up
from compute.sessions import Sessions
from models import ComputeNode, HostMapping, Service
from models.host_mapping import DEFAULT_CELL
from novaq.settings import Settings

LOG = logging.getLogger(__name__)


def discover_hosts(sessions: Sessions) -> list[str]:
    """Map every unmapped compute host to ``cell1``; the hosts this call mapped, sorted."""
    with sessions() as session:
        mapped = [host for host in _unmapped_compute_hosts(session) if _map_host(session, host)]
        _mark_nodes_mapped(session)
    for host in mapped:
        LOG.info("Created host mapping for compute host '%s': cell %s", host, DEFAULT_CELL)
    return mapped


def _unmapped_compute_hosts(session: Session) -> list[str]:
    known = select(HostMapping.host)
    return sorted(
        set(
            session.scalars(
                select(Service.host).where(
                    Service.binary == COMPUTE, Service.deleted == 0, Service.host.not_in(known)
                )
            )
        )
    )


def _map_host(session: Session, host: str) -> bool:
    """Insert the host's mapping; False if a concurrent run mapped it first."""
    try:
        with session.begin_nested():
            session.add(HostMapping(host=host, cell_name=DEFAULT_CELL))
    except IntegrityError:
        LOG.info("Compute host '%s' was mapped by another discovery meanwhile", host)
        return False
    return True


def _mark_nodes_mapped(session: Session) -> None:
    """Nova's ``compute_nodes.mapped``: set on every node whose host has a mapping (also
    a node added later to a host mapped before)."""
    session.execute(
        update(ComputeNode)
        .where(
            ComputeNode.deleted == 0,
            ComputeNode.mapped == 0,
            ComputeNode.host.in_(select(HostMapping.host)),
        )
        .values(mapped=1)
    )


def scheduler_leader(session: Session, settings: Settings) -> str | None:
    """Nova's leader: the alphabetically first scheduler service that is up, or None."""
    services = session.scalars(
        select(Service).where(Service.binary == SCHEDULER, Service.deleted == 0)
    )
    up = sorted(service.host for service in services if is_up(service, settings))
    return up[0] if up else None


def discover_hosts_in_cells(ctx: PeriodicContext) -> dict[str, Any]:
    """The periodic pass (a cluster task): map new hosts, say who Nova's leader would be
    and which scheduler acted."""
    with ctx.sessions() as session:
        leader = scheduler_leader(session, ctx.settings)
    hosts = discover_hosts(ctx.sessions)
    if hosts:
        LOG.info("Discovered %d new hosts: %s", len(hosts), ", ".join(hosts))
    return {
        "mapped": hosts,
        "cell": DEFAULT_CELL,
        "leader": leader,
        "acted_on": ctx.settings.host,
    }
