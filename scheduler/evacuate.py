"""Destination selection for an evacuation (Nova's conductor ``rebuild_instance`` with
``recreate``): the instance's boot request with the source ignored (Nova's
``ignore_hosts = [instance.host]``), the host the operator named as the requested
destination (still filtered, as Nova ≥ 2.29 without ``force``), every filter and weigher,
then a move claim (the migration takes the source allocation, the instance claims the
destination), the migration's destination and ``pre-migrating`` written in the same
transaction."""

from __future__ import annotations

import dataclasses
import logging

from sqlalchemy.orm import Session

from compute.claims import claim_first
from compute.instance_state import cas_update
from compute.migrations import get_migration, node_id, pci_requests
from compute.sessions import Sessions
from compute.states import TaskState
from models.states import MigrationStatus
from novaq.exceptions import UnexpectedTaskStateError
from scheduler.candidates import load_candidates
from scheduler.groups import load_instance_group
from scheduler.host_state import HostState
from scheduler.manager import Scheduler, claim_destination, placed_selection
from scheduler.request_spec import RequestSpec, Selection

LOG = logging.getLogger(__name__)


def evacuation_spec(session: Session, migration_uuid: str) -> RequestSpec:
    """The request of an evacuation: the boot request, same flavor and devices, the
    source ignored, no forced host (Nova's ``reset_forced_destinations``)."""
    migration = get_migration(session, migration_uuid)
    base = RequestSpec.from_dict(dict(migration.context.request_spec))
    return dataclasses.replace(
        base,
        flavor=migration.flavors.new,
        pci_requests=tuple(pci_requests(migration.context.new_pci_requests)),
        ignore_hosts=(migration.source_compute or "",),
        requested_host=migration.context.requested_host,
        force_hosts=(),
        instance_group=load_instance_group(session, base.group) if base.group else None,
    )


class EvacuationScheduler:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def select(self, sessions: Sessions, migration_uuid: str) -> Selection:
        """The claimed destination (``NoValidHost`` naming the filters when none fits).
        A redelivered request finds its destination already claimed and returns it."""
        with sessions(read_only=True) as session:
            migration = get_migration(session, migration_uuid)
            placed = placed_selection(session, migration)
            if placed is not None:  # a redelivered request: already placed
                return placed
            spec = evacuation_spec(session, migration_uuid)
            source_id = node_id(session, migration.source_compute, migration.source_node)
            targets = (spec.requested_host,) if spec.requested_host else ()
            candidates = load_candidates(
                session,
                self.scheduler.settings,
                spec.resources,
                targets,
                with_stats=self.scheduler.needs_stats([spec]),
            )
            self.scheduler.add_weigher_facts(session, candidates.hosts, [spec])
        ranked = self.scheduler.rank(candidates.hosts, spec, prefilter=candidates.prefilter)
        fit = claim_first(
            sessions,
            ranked,
            lambda s, h: _claim_evacuation(s, h, spec, migration_uuid, source_id),
            lambda h: h.host,
        )
        if fit.chosen is None:
            raise fit.no_valid_host()
        host = fit.chosen
        LOG.info("Evacuation %s: selected %s/%s", migration_uuid, host.host, host.nodename)
        return Selection(host.host, host.nodename, host.compute_node_id, (), spec.instance_uuid)


def _claim_evacuation(
    session: Session, host: HostState, spec: RequestSpec, migration_uuid: str, source_id: int
) -> None:
    migration = get_migration(session, migration_uuid)
    if migration.status != MigrationStatus.ACCEPTED:
        raise UnexpectedTaskStateError(
            uuid=spec.instance_uuid,
            expected="evacuation accepted",
            actual=f"evacuation {migration.status}",
        )
    # The instance must still be waiting for this evacuation (not deleted meanwhile).
    cas_update(session, spec.instance_uuid, expected_task_state=[TaskState.REBUILDING])
    claim_destination(session, host, spec, migration_uuid, source_id)
    migration.status = MigrationStatus.PRE_MIGRATING
