"""Select a destination and claim it (Nova's ``select_destinations`` plus placement's
claim): filter, weigh, then try the candidates best first until one claim succeeds.

The claim and the instance's host/node are written in one transaction, guarded twice:
by the node's generation (no overcommit) and by the instance's task_state (a server
deleted while it was being scheduled is not placed).
"""

from __future__ import annotations

import logging
import random

from sqlalchemy.orm import Session

from compute.claims import claim_in_session, retry_on_conflict
from compute.instance_state import cas_update, get_instance
from compute.resource_tracker import get_node
from compute.states import TaskState, VmState
from models.db import session_scope
from novaq.exceptions import NoValidHost, ResourcesUnavailable
from novaq.settings import Settings
from scheduler.filters import BaseFilter, load_filters, run_filters
from scheduler.host_state import HostState, load_host_states
from scheduler.request_spec import RequestSpec, Selection
from scheduler.weights import BaseWeigher, load_weighers, weigh_hosts

LOG = logging.getLogger(__name__)


class Scheduler:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.filters: list[BaseFilter] = load_filters(settings)
        self.weighers: list[BaseWeigher] = load_weighers(settings)

    def rank(self, hosts: list[HostState], spec: RequestSpec) -> list[HostState]:
        """Filtered hosts best first; the top ``host_subset_size`` are shuffled as Nova picks
        randomly among them. Raises ``NoValidHost`` naming what each filter removed."""
        hosts = [h for h in hosts if h.host not in spec.ignore_hosts]
        passing, report = run_filters(self.filters, hosts, spec)
        if not passing:
            raise NoValidHost(reason=f"Filters: {'; '.join(report) or 'no compute hosts'}.")
        ranked = [h for _, h in weigh_hosts(self.weighers, passing, spec)]
        subset = min(self.settings.filter_scheduler.host_subset_size, len(ranked))
        head = ranked[:subset]
        random.shuffle(head)
        return head + ranked[subset:]

    def select_and_claim(self, db_url: str, spec: RequestSpec) -> Selection:
        """Pick and claim a host for one instance, trying the next candidate when a claim
        finds the host full (another request won the race).

        A redelivered request whose instance was already placed gets that placement back
        instead of a second claim elsewhere."""
        with session_scope(db_url) as session:
            placed = _existing_selection(session, spec.instance_uuid)
            if placed is not None:
                return placed
            hosts = load_host_states(session, self.settings)
        ranked = self.rank(hosts, spec)
        lost = []
        for index, host in enumerate(ranked):
            try:
                retry_on_conflict(db_url, lambda s, h=host: self._claim(s, h, spec))
            except ResourcesUnavailable as exc:
                LOG.info("Instance %s: claim on %s failed: %s", spec.instance_uuid, host.host, exc)
                lost.append(f"{host.host}: {exc}")
                continue
            alternates = tuple(
                (h.host, h.nodename, h.compute_node_id)
                for h in ranked[index + 1 : index + self.settings.scheduler.max_attempts]
            )
            LOG.info("Instance %s: selected %s/%s", spec.instance_uuid, host.host, host.nodename)
            return Selection(host.host, host.nodename, host.compute_node_id, alternates)
        raise NoValidHost(
            reason="Every host that passed the filters was taken by other claims meanwhile ("
            + "; ".join(lost)
            + ")."
        )

    @staticmethod
    def _claim(session: Session, host: HostState, spec: RequestSpec) -> None:
        claim_in_session(session, host.compute_node_id, spec.instance_uuid, spec.resources)
        cas_update(
            session,
            spec.instance_uuid,
            expected_task_state=[TaskState.SCHEDULING],
            expected_vm_state=[VmState.BUILDING],
            host=host.host,
            node=host.nodename,
        )


def _existing_selection(session: Session, instance_uuid: str) -> Selection | None:
    instance = get_instance(session, instance_uuid)
    if instance.host is None or instance.node is None:
        return None
    node = get_node(session, instance.host, instance.node)
    if node is None:
        return None
    return Selection(instance.host, instance.node, node.id)
