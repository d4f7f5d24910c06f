"""Select destinations and claim them (Nova's ``select_destinations`` plus placement's
claim): for each instance of a request, filter, weigh, then claim the best host; the
chosen host's state is debited before the next instance, and each instance gets
alternates for a reschedule (Nova never calls the scheduler again on reschedule).

A claim and the instance's host/node are written in one transaction, guarded by the
node's generation (no overcommit), the instance's task_state (a server deleted while
being scheduled is not placed) and, for hard (anti-)affinity, the group's members as the
transaction sees them (two requests racing for one group cannot both win).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import random
from collections.abc import Callable, Sequence

from sqlalchemy import Select, String, bindparam, select
from sqlalchemy.orm import Session

from compute import instance_state
from compute.claims import (
    RETRYABLE,
    UnwrittenConflict,
    claim,
    claim_first,
    move_claim,
    release,
    retry_on_conflict,
)
from compute.instance_state import cas_update, get_instance, place
from compute.migrations import get_migration, node_id
from compute.resource_tracker import get_node
from compute.sessions import Sessions, reads_in_writer
from compute.states import TaskState, VmState
from models import Instance, Migration
from novaq.exceptions import (
    InstanceNotFound,
    NoValidHost,
    ResourcesUnavailable,
    UnexpectedTaskStateError,
)
from novaq.settings import Settings
from scheduler.candidates import Candidates, Placement, load_candidates
from scheduler.filters import BaseFilter, load_filters, run_filters
from scheduler.groups import load_instance_group
from scheduler.host_state import HostState
from scheduler.instance_images import add_instance_image_props
from scheduler.report import FilterStep, no_valid_host
from scheduler.request_spec import InstanceGroup, RequestSpec, Selection
from scheduler.weights import BaseWeigher, load_weighers, weigh_hosts

LOG = logging.getLogger(__name__)

#: (task_state, vm_state) of an instance the scheduler places for its build.
BUILD_PLACING = (TaskState.SCHEDULING, VmState.BUILDING)

#: The selections ``OnPlaced`` was given, by the (instance, host) of the claim whose
#: transaction gave them (a claim retried on another host gives them again).
Handed = dict[tuple[str, str], list[Selection]]

#: Called in the transaction of a request's last claim with every selection of the
#: request (alternates included), so what follows from them commits with that claim.
OnPlaced = Callable[[Session, list[Selection]], None]


class Scheduler:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.filters: list[BaseFilter] = load_filters(
            settings, settings.filter_scheduler.enabled_filters
        )
        self.weighers: list[BaseWeigher] = load_weighers(settings)

    def needs_instances(self, specs: Sequence[RequestSpec]) -> bool:
        """Whether any filter or weigher reads the hosts' instance uuids for these
        requests (hints naming instances, server groups): only then are they loaded."""
        filters = [f for f in self.filters if f.reads_instances]
        weighers = [w for w in self.weighers if w.reads_instances]
        return any(f.needs_instances(spec) for f in filters for spec in specs) or any(
            not w.ignores(spec) for w in weighers for spec in specs
        )

    @staticmethod
    def needs_pci_pools(specs: Sequence[RequestSpec]) -> bool:
        """Whether any of these requests asks for PCI devices: only then are the hosts'
        free devices read by pool (PciPassthroughFilter, the claim's debit); PCIWeigher
        needs only how many (``HostState.pci_free_count``)."""
        return any(spec.pci_requests for spec in specs)

    def needs_stats(self, specs: Sequence[RequestSpec]) -> bool:
        """Whether any filter reads the instance-derived ``stats`` for these requests
        (``BaseFilter.reads_stats``): only then are they counted."""
        return any(f.reads_stats(spec) for f in self.filters for spec in specs)

    def add_weigher_facts(
        self, session: Session, hosts: Sequence[HostState], specs: Sequence[RequestSpec]
    ) -> None:
        """Read what only some weighers need of the candidates, when one of them counts for
        these requests on some host: the image properties of the hosts' instances
        (ImagePropertiesWeigher, off by default)."""
        weighers = [w for w in self.weighers if w.reads_instance_images]
        if any(not w.ignores(s) for w in weighers for s in specs) and any(
            _weighs_somewhere(w, hosts) for w in weighers
        ):
            add_instance_image_props(session, hosts)

    # -- pure decisions -------------------------------------------------------------------
    def candidates(
        self, hosts: list[HostState], spec: RequestSpec
    ) -> tuple[list[HostState], list[FilterStep]]:
        """Nova's host manager: ignored hosts out; forced hosts bypass the filters; a
        requested host narrows the set but is still filtered. Returns the hosts left and
        what each narrowing removed (for NoValidHost)."""
        steps = []
        if spec.ignore_hosts:
            before = len(hosts)
            hosts = [h for h in hosts if h.host not in spec.ignore_hosts]
            ignored = ", ".join(spec.ignore_hosts)
            steps.append(FilterStep(f"ignored hosts ({ignored})", before, len(hosts)))
        if spec.requested_host:
            before = len(hosts)
            hosts = [h for h in hosts if h.host == spec.requested_host]
            steps.append(FilterStep(f"requested host {spec.requested_host}", before, len(hosts)))
        return hosts, steps

    def rank(
        self, hosts: list[HostState], spec: RequestSpec, prefilter: str = ""
    ) -> list[HostState]:
        """Filtered hosts best first. Raises ``NoValidHost`` naming the filter that removed
        the last hosts first (``scheduler.report``).

        Every filter runs for every instance of a multi-create, ``run_filter_once_per_request``
        ones included: Nova skips those after the first instance over candidates placement
        has already narrowed to the zone; over novaq's whole candidate list, skipping
        ``AvailabilityZoneFilter`` let instances 2..N land outside the requested zone.
        Their verdict is the same for every instance, so running them again changes only
        the cost."""
        hosts, steps = self.candidates(hosts, spec)
        facts = [prefilter] if prefilter else []
        if spec.requested_host:  # the host the operator named is always named back
            facts.insert(0, f"requested host {spec.requested_host}")
        if spec.force_hosts:
            passing = [h for h in hosts if h.host in spec.force_hosts]
            forced = ", ".join(spec.force_hosts)
            steps.append(FilterStep(f"forced hosts ({forced})", len(hosts), len(passing)))
        else:
            passing, report = run_filters(self.filters, hosts, spec)
            steps += report
        if not passing:
            raise no_valid_host(steps, facts)
        weighed = weigh_hosts(self.weighers, passing, spec)
        return self._pick_order(weighed)

    def _pick_order(self, weighed: list[tuple[float, HostState]]) -> list[HostState]:
        ranked = [h for _, h in weighed]
        options = self.settings.filter_scheduler
        if options.shuffle_best_same_weighed_hosts:
            best = [h for w, h in weighed if w == weighed[0][0]]
            random.shuffle(best)
            ranked = best + ranked[len(best) :]
        subset = min(options.host_subset_size, len(ranked))
        head = ranked[:subset]
        random.shuffle(head)
        return head + ranked[subset:]

    # -- decisions with claims ------------------------------------------------------------
    def schedule(
        self,
        sessions: Sessions,
        specs: Sequence[RequestSpec],
        on_placed: OnPlaced | None = None,
    ) -> list[Selection]:
        """Place every instance of one request, or none (Nova: a multi-create that cannot
        place all its instances fails whole). Instances deleted meanwhile are skipped.

        Two transactions per instance: one that only reads (the candidates, the group, the
        instances' rows), then the claim's short write (its compare-and-swaps make a
        decision on what was read safe against every race). ``on_placed`` is called in
        the last claim's transaction, with the request's selections, when the request's
        last instance is claimed there (not when it was placed before: a redelivery).

        On PostgreSQL one instance's reads and its first claim share one transaction
        (``_schedule_in_one``)."""
        if len(specs) == 1 and reads_in_writer(sessions):
            return self._schedule_in_one(sessions, specs[0], on_placed)
        return self._schedule_apart(sessions, specs, on_placed)

    def _schedule_apart(
        self,
        sessions: Sessions,
        specs: Sequence[RequestSpec],
        on_placed: OnPlaced | None = None,
    ) -> list[Selection]:
        """``schedule`` in a reader's transaction, then a claim's per instance."""
        with sessions(read_only=True) as session:
            group, specs, candidates, rows = self._read(session, specs)
            hosts = candidates.hosts
            gone = {s.instance_uuid for s in specs if s.instance_uuid not in rows}
            placed = {u: _existing_selection(session, *row) for u, row in rows.items()}
        # NOTE: an instance with no row is a boot the API took back after its publish
        # failed (``workflows.api.submit``) while the message still reached the broker:
        # nothing to place, and nothing claimed for it.
        specs = [s for s in specs if s.instance_uuid not in gone]
        if gone:
            LOG.info("Instances %s no longer exist: not scheduled", sorted(gone))
        if not specs:
            return []
        selections: list[Selection] = []
        rankings: list[list[HostState]] = []
        claimed: list[str] = []
        handed: Handed = {}  # what ``on_placed`` was given
        try:
            for index, spec in enumerate(specs):
                if group is not None:  # with the members placed so far
                    spec = dataclasses.replace(spec, instance_group=group)
                existing = placed[spec.instance_uuid]
                if existing is not None:  # a redelivered request: keep what was claimed
                    selections.append(
                        dataclasses.replace(existing, instance_uuid=spec.instance_uuid)
                    )
                    rankings.append([])
                    continue
                ranked = self.rank(hosts, spec, prefilter=candidates.prefilter)
                last = on_placed if index == len(specs) - 1 else None
                then = self._placing_last(last, spec, ranked, selections, rankings, handed)
                chosen = self.claim_first(sessions, ranked, spec, then=then)
                if chosen is None:
                    continue  # deleted while being scheduled
                chosen.consume(spec.resources, spec.instance_uuid)
                if group is not None:
                    group = group.with_host(chosen.host)
                claimed.append(spec.instance_uuid)
                selections.append(
                    Selection(
                        chosen.host,
                        chosen.nodename,
                        chosen.compute_node_id,
                        instance_uuid=spec.instance_uuid,
                    )
                )
                rankings.append(ranked)
        except NoValidHost:
            for instance_uuid in claimed:
                _unplace(sessions, instance_uuid)
            raise
        forced = bool(specs[0].force_hosts)
        return _handed(selections, handed) or self._with_alternates(selections, rankings, forced)

    def _schedule_in_one(
        self, sessions: Sessions, spec: RequestSpec, on_placed: OnPlaced | None
    ) -> list[Selection]:
        """``schedule`` for one instance where reads in a writer's transaction hold
        nothing (PostgreSQL, ``compute.sessions.reads_take_no_locks``): the reads and
        the claim on the best host in one transaction, two round trips (a COMMIT and a
        BEGIN) and a checkout fewer than a reader's transaction and then a writer's.

        The claim's guards are the same (its compare-and-swaps make the decision safe on
        whatever was read); if that first claim fails in any way ``claim_first`` would
        go on from (the host was taken, a generation conflict), the transaction rolls
        back whole and ``claim_first`` claims as ``schedule`` does, from the best host."""
        forced = bool(spec.force_hosts)
        ranked: list[HostState] | None = None
        then: Callable[[Session, HostState], None] | None = None
        handed: Handed = {}
        try:
            with sessions() as session:
                _group, specs, candidates, rows = self._read(session, [spec])
                spec = specs[0]
                if spec.instance_uuid not in rows:  # see schedule's NOTE
                    LOG.info("Instances %s no longer exist: not scheduled", [spec.instance_uuid])
                    return []
                existing = _existing_selection(session, *rows[spec.instance_uuid])
                if existing is not None:  # a redelivered request: keep what was claimed
                    redelivered = dataclasses.replace(existing, instance_uuid=spec.instance_uuid)
                    return self._with_alternates([redelivered], [[]], forced)
                ranked = self.rank(candidates.hosts, spec, prefilter=candidates.prefilter)
                then = self._placing_last(on_placed, spec, ranked, [], [], handed)
                _claim_in_transaction(session, ranked[0], spec)
                if then is not None:
                    then(session, ranked[0])
            chosen: HostState | None = ranked[0]
            LOG.info(
                "Instance %s: selected %s/%s",
                spec.instance_uuid,
                ranked[0].host,
                ranked[0].nodename,
            )
        except (ResourcesUnavailable, *RETRYABLE) as exc:
            if ranked is None:
                raise  # not the claim's
            LOG.info("Instance %s: claim on %s failed: %s", spec.instance_uuid, ranked[0].host, exc)
            chosen = self.claim_first(sessions, ranked, spec, then=then)
        except (UnexpectedTaskStateError, InstanceNotFound) as exc:
            if ranked is None:
                raise
            LOG.info("Instance %s left %s: %s", spec.instance_uuid, BUILD_PLACING[0], exc)
            chosen = None
        if chosen is None:
            return []
        selection = Selection(
            chosen.host, chosen.nodename, chosen.compute_node_id, instance_uuid=spec.instance_uuid
        )
        return _handed([selection], handed) or self._with_alternates(
            [selection], [ranked or []], forced
        )

    def _read(
        self, session: Session, specs: Sequence[RequestSpec]
    ) -> tuple[InstanceGroup | None, list[RequestSpec], Candidates, dict[str, Placement]]:
        """What ``schedule`` reads before it decides: the request's server group (given to
        each spec), the candidates, and the (host, node) of each instance that has a row.
        """
        first = specs[0]
        targets = first.force_hosts or ((first.requested_host,) if first.requested_host else ())
        group = load_instance_group(session, first.group) if first.group else None
        # Each spec given the group, copied only when that changes it (a copy loads the
        # flavor and works out the resources again).
        if group is not None or any(s.instance_group is not None for s in specs):
            given = [dataclasses.replace(s, instance_group=group) for s in specs]
        else:
            given = list(specs)
        candidates = load_candidates(
            session,
            self.settings,
            first.resources,
            targets,
            with_instances=self.needs_instances(given),
            with_stats=self.needs_stats(given),
            # One instance: its placement comes with the candidates (a round trip less).
            placement_of=first.instance_uuid if len(given) == 1 else None,
            with_pci_pools=self.needs_pci_pools(given),
        )
        self.add_weigher_facts(session, candidates.hosts, given)
        if candidates.placed:
            placement = candidates.placement
            rows = {} if placement is None else {first.instance_uuid: placement}
        else:  # several instances, or no candidate row to carry the placement
            rows = _placement_rows(session, [s.instance_uuid for s in given])
        return group, given, candidates, rows

    def _placing_last(
        self,
        on_placed: OnPlaced | None,
        spec: RequestSpec,
        ranked: list[HostState],
        selections: list[Selection],
        rankings: list[list[HostState]],
        handed: Handed | None = None,
    ) -> Callable[[Session, HostState], None] | None:
        """What the last claim's transaction calls once ``spec`` is claimed on a host:
        ``on_placed`` with the request's selections as ``schedule`` returns them (kept
        in ``handed``, for ``schedule`` to return rather than work them out again)."""
        if on_placed is None:
            return None
        forced = bool(spec.force_hosts)

        def then(session: Session, host: HostState) -> None:
            last = Selection(
                host.host, host.nodename, host.compute_node_id, instance_uuid=spec.instance_uuid
            )
            placed = self._with_alternates([*selections, last], [*rankings, ranked], forced)
            if handed is not None:
                handed[(spec.instance_uuid, host.host)] = placed
            on_placed(session, placed)

        return then

    def select_and_claim(self, sessions: Sessions, spec: RequestSpec) -> Selection | None:
        """One instance: its claimed selection, or None if it was deleted meanwhile."""
        selections = self.schedule(sessions, [spec])
        return selections[0] if selections else None

    def claim_first(
        self,
        sessions: Sessions,
        ranked: list[HostState],
        spec: RequestSpec,
        placing: tuple[str, str] = BUILD_PLACING,
        then: Callable[[Session, HostState], None] | None = None,
    ) -> HostState | None:
        """The first host of ``ranked`` that takes ``spec``'s claim, written with the
        instance's host and node while it is still in ``placing`` (task_state, vm_state);
        None when it left that state meanwhile (deleted). Raises ``NoValidHost`` when other
        claims took every host. ``then``: called in the claim's transaction, last."""

        def take(session: Session, host: HostState) -> None:
            _claim(session, host, spec, placing)
            if then is not None:
                then(session, host)

        def refused(host: HostState, exc: ResourcesUnavailable) -> None:
            LOG.info("Instance %s: claim on %s failed: %s", spec.instance_uuid, host.host, exc)

        try:
            fit = claim_first(sessions, ranked, take, _host_name, refused)
        except (UnexpectedTaskStateError, InstanceNotFound) as exc:
            LOG.info("Instance %s left %s: %s", spec.instance_uuid, placing[0], exc)
            return None
        if fit.chosen is None:
            raise fit.no_valid_host()
        host = fit.chosen
        LOG.info("Instance %s: selected %s/%s", spec.instance_uuid, host.host, host.nodename)
        return host

    def _with_alternates(
        self,
        selections: list[Selection],
        rankings: list[list[HostState]],
        forced: bool = False,
    ) -> list[Selection]:
        """Up to ``max_attempts - 1`` alternates per instance, never a host selected for
        any instance of this request (Nova's ``_get_alternate_hosts``); none for a forced
        host, which Nova never reschedules."""
        chosen = {s.host for s in selections}
        wanted = 0 if forced else self.settings.scheduler.max_attempts - 1
        result = []
        for selection, ranked in zip(selections, rankings, strict=True):
            others = (h for h in ranked if h.host not in chosen)
            alternates = [h.as_alternate() for h in itertools.islice(others, wanted)]
            result.append(dataclasses.replace(selection, alternates=tuple(alternates)))
        return result


def _claim(session: Session, host: HostState, spec: RequestSpec, placing: tuple[str, str]) -> None:
    task_state, vm_state = placing
    uuid, node_id = spec.instance_uuid, host.compute_node_id
    if spec.instance_group:  # the group's check reads between the claim and the placement
        claim(session, node_id, uuid, spec.resources)
        check_group_policy(session, spec.instance_group, uuid, host.host)
        place(session, uuid, task_state, vm_state, host.host, host.nodename)
        return
    # On PostgreSQL a fresh claim writes the placement in its own statement.
    with_claim = instance_state.placing(uuid, task_state, vm_state, host.host, host.nodename)
    rows = claim(session, node_id, uuid, spec.resources, placing=with_claim)
    if rows is None:
        place(session, uuid, task_state, vm_state, host.host, host.nodename)
    else:
        instance_state.placed(session, rows, uuid, task_state, vm_state)


#: How many times PostgreSQL's one-transaction decision claims the best host in its own
#: transaction when another claim moved the host's generation between the claim's read
#: and its compare-and-swap (reading the host again each time), before it rolls back and
#: ``claim_first`` takes over as for any other failed claim.
CLAIMS_IN_TRANSACTION = 3


def _claim_in_transaction(session: Session, host: HostState, spec: RequestSpec) -> None:
    """``_claim`` on ``host``, made again in the same transaction after a conflict that
    wrote nothing (``UnwrittenConflict``). Not rolled back: on PostgreSQL a ROLLBACK also
    makes psycopg drop every statement it prepared on the connection, so the server
    parses and plans them again; under a burst of boots the scheduler's two children
    lost them to about one decision in four, the best host being the same for both
    (issue 16)."""
    for attempt in range(1, CLAIMS_IN_TRANSACTION + 1):
        try:
            _claim(session, host, spec, BUILD_PLACING)
            return
        except UnwrittenConflict as exc:
            if attempt == CLAIMS_IN_TRANSACTION:
                raise
            LOG.debug("Instance %s: %s; claiming again", spec.instance_uuid, exc)


def _handed(selections: list[Selection], handed: Handed) -> list[Selection] | None:
    """What ``on_placed`` was given by the claim of the request's last selection (the same
    list ``_with_alternates`` would make again), or None: no such claim gave any (its
    instance was skipped, no ``on_placed``)."""
    if not selections or selections[-1].instance_uuid is None:
        return None
    return handed.get((selections[-1].instance_uuid, selections[-1].host))


def _weighs_somewhere(weigher: BaseWeigher, hosts: Sequence[HostState]) -> bool:
    """Whether ``weigher``'s multiplier is not 0 on some host (the option's value on every
    host outside aggregates, an aggregate's override on the others)."""
    plain = next((h for h in hosts if not h.aggregates), None)
    if plain is not None and weigher.multiplier(plain) != 0:
        return True
    return any(weigher.multiplier(h) != 0 for h in hosts if h.aggregates)


class MoveScheduler:
    """Destination selection for a resize or cold migration: the same filters and weighers,
    and a move claim (the migration takes the source, the instance claims the destination)
    with the migration's destination written in the same transaction."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def select(self, sessions: Sessions, spec: RequestSpec, migration_uuid: str) -> Selection:
        with sessions() as session:
            migration = get_migration(session, migration_uuid)
            placed = placed_selection(session, migration)
            if placed is not None:
                return placed
            source_id = node_id(session, migration.source_compute, migration.source_node)
            targets = (spec.requested_host,) if spec.requested_host else ()
            candidates = load_candidates(
                session,
                self.scheduler.settings,
                spec.resources,
                targets,
                with_instances=self.scheduler.needs_instances([spec]),
                with_stats=self.scheduler.needs_stats([spec]),
            )
            self.scheduler.add_weigher_facts(session, candidates.hosts, [spec])
        ranked = self.scheduler.rank(candidates.hosts, spec, prefilter=candidates.prefilter)
        fit = claim_first(
            sessions,
            ranked,
            lambda s, h: _claim_move(s, h, spec, migration_uuid, source_id),
            _host_name,
        )
        if fit.chosen is None:
            raise fit.no_valid_host()
        host = fit.chosen
        wanted = self.scheduler.settings.scheduler.max_attempts - 1
        following = itertools.islice(ranked, fit.index + 1, fit.index + 1 + wanted)
        alternates = tuple(h.as_alternate() for h in following)
        return Selection(
            host.host, host.nodename, host.compute_node_id, alternates, spec.instance_uuid
        )


def _host_name(host: HostState) -> str:
    return host.host


def _claim_move(
    session: Session, host: HostState, spec: RequestSpec, migration_uuid: str, source_id: int
) -> None:
    claim_destination(session, host, spec, migration_uuid, source_id)
    cas_update(session, spec.instance_uuid, expected_task_state=[TaskState.RESIZE_PREP])


def placed_selection(session: Session, migration: Migration) -> Selection | None:
    """The destination a move (or an evacuation) already claimed: a redelivered request
    answers with it instead of placing the server again; None while none is claimed."""
    if migration.dest_compute is None:
        return None
    dest_id = node_id(session, migration.dest_compute, migration.dest_node)
    return Selection(
        migration.dest_compute,
        migration.dest_node or "",
        dest_id,
        instance_uuid=migration.instance_uuid,
    )


def claim_destination(
    session: Session, host: HostState, spec: RequestSpec, migration_uuid: str, source_id: int
) -> None:
    """A move's claim on ``host`` (a resize, a cold migration, an evacuation): the
    migration holds the source, the instance the destination; the server group's policy
    holds; the migration names its destination."""
    move_claim(
        session,
        spec.instance_uuid,
        migration_uuid,
        source_id,
        host.compute_node_id,
        spec.resources,
    )
    if spec.instance_group:
        check_group_policy(session, spec.instance_group, spec.instance_uuid, host.host)
    migration = get_migration(session, migration_uuid)
    migration.dest_compute, migration.dest_node = host.host, host.nodename


def check_group_policy(
    session: Session, group: InstanceGroup, instance_uuid: str, host: str
) -> None:
    """Hard (anti-)affinity as the claim's transaction sees the members: the late check
    Nova does on the compute host, done where it can still pick another host."""
    policy = group.policy
    if policy not in ("affinity", "anti-affinity"):
        return
    others = [m for m in group.members if m != instance_uuid]
    if not others:
        return
    hosts = list(
        session.scalars(
            select(Instance.host).where(
                Instance.uuid.in_(others), Instance.deleted == 0, Instance.host.is_not(None)
            )
        )
    )
    if policy == "anti-affinity":
        limit = group.max_server_per_host
        if hosts.count(host) >= limit:
            raise ResourcesUnavailable(node=host, reason="anti-affinity group already on this host")
    elif hosts and host not in hosts:
        raise ResourcesUnavailable(
            node=host, reason=f"affinity group is on {sorted({h for h in hosts if h})}"
        )


def _placement_rows(session: Session, uuids: Sequence[str]) -> dict[str, Placement]:
    """(host, node) of each of these instances that has a row (deleted ones included), in
    one query."""
    rows = session.execute(_placement_query(), {"uuids": list(uuids)})
    return {uuid: (host, node) for uuid, host, node in rows}


@functools.cache
def _placement_query() -> Select[tuple[str, str | None, str | None]]:
    # Built once: building it cost more than running it. On the table's columns: the
    # same SQL without the ORM's compile state and result.
    uuids = bindparam("uuids", type_=String, expanding=True)
    c = Instance.__table__.c
    return select(c.uuid, c.host, c.node).where(c.uuid.in_(uuids))


def _existing_selection(session: Session, host: str | None, node: str | None) -> Selection | None:
    """The placement an instance already has (a redelivered request), if its node is still
    there."""
    if host is None or node is None:
        return None
    row = get_node(session, host, node)
    if row is None:
        return None
    return Selection(host, node, row.id)


def _unplace(sessions: Sessions, instance_uuid: str) -> None:
    """Undo one placement of a request that failed as a whole."""
    retry_on_conflict(sessions, lambda session: release(session, instance_uuid))
    with sessions() as session:
        instance = get_instance(session, instance_uuid)
        if instance.task_state == TaskState.SCHEDULING:
            instance.host = instance.node = None
