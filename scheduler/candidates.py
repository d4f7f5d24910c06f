"""The host states of a request's candidates, read fresh from the database in a constant
number of queries (never one per host): one query for the nodes with everything the
filters and weighers ask of every host, then what only some hosts or requests need.

The costs here are per decision and per candidate (up to ``max_placement_results``), so
the rows are read as plain tuples (Core, no ORM objects), derived per-row facts (service
up, instance counts, free PCI devices) are computed by the database in the same query,
and settings are read once per call.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select
from sqlalchemy.orm import Session

from compute.claims import ResourceRequest
from compute.stats import instance_stats, io_weight
from models import utcnow
from novaq.settings import Settings
from scheduler.candidate_sql import (
    AGGREGATED,
    ONE_OF,
    PCI_FREE,
    aggregates_query,
    candidates_query,
    instance_stats_query,
    instances_query,
    pci_pools_query,
)
from scheduler.host_state import AggregateInfo, HostState

__all__ = ["Candidates", "Placement", "load_candidates", "load_host_states"]


#: An instance's (host, node) as its row has them; no row: None.
Placement = tuple[str | None, str | None]


@dataclass(frozen=True, slots=True)
class Candidates:
    """Host states of one request, and what the capacity pre-filter kept; with
    ``placement_of``, that instance's placement as the same statement read it, when it
    returned any row (``placed``: False, not read)."""

    hosts: list[HostState]
    prefilter: str
    placed: bool = False
    placement: Placement | None = None


def load_host_states(
    session: Session,
    settings: Settings,
    request: ResourceRequest | None = None,
    hosts: Sequence[str] = (),
) -> list[HostState]:
    return load_candidates(session, settings, request, hosts).hosts


def load_candidates(
    session: Session,
    settings: Settings,
    request: ResourceRequest | None = None,
    hosts: Sequence[str] = (),
    with_instances: bool = True,
    with_stats: bool = False,
    placement_of: str | None = None,
    with_pci_pools: bool = True,
) -> Candidates:
    """The compute nodes a request may land on, with their services, PCI pools,
    aggregates and instances, in a constant number of queries whatever the number of hosts.

    With a ``request``, a placement-style pre-filter runs in SQL first: enabled services
    with room for the request under the allocation ratios, at most
    ``[scheduler] max_placement_results`` of them (Nova's limit on allocation candidates).
    ``hosts`` (forced or requested hosts) replaces the pre-filter.

    ``with_instances=False`` leaves each host's ``instances`` (the uuids) empty, for a
    request no filter or weigher asks them of (``Scheduler.needs_instances``);
    the counts (``num_instances``, ``num_io_ops``) are always there.

    ``with_stats=True`` adds to each host's ``stats`` the resource tracker's counts of its
    instances (``compute.stats``: ``num_vm_active``, ``num_proj_<project>``...), in one
    more query, for a request some filter reads them for (``Scheduler.needs_stats``).

    ``placement_of``: an instance uuid whose (host, node) the same statement reads
    (``Candidates.placement``: None when it has no row), unless no candidate came back.

    ``with_pci_pools=False`` reads no PCI pools: each host's ``pci_free_count`` is its
    number of free devices instead, from the candidates' statement, for a request that
    asks for no device (``Scheduler.needs_pci_pools``)."""
    params = _parameters(settings, request, hosts, placement_of)
    dialect = session.get_bind().dialect.name
    asked = (True, True, True)
    if request is not None:
        asked = (request.vcpus > 0, request.memory_mb > 0, request.disk_gb > 0)
    prefiltered = request is not None and not hosts
    query = candidates_query(bool(hosts), prefiltered, dialect, asked, placement_of is not None)
    rows = _fetch_tuples(session, query, params)
    prefilter = ""
    if request is not None and not hosts:
        prefilter = f"capacity pre-filter (placement): {len(rows)} enabled hosts with room for " + (
            f"VCPU={request.vcpus}, MEMORY_MB={request.memory_mb}, DISK_GB={request.disk_gb}"
        )
    states = _host_states(rows, settings)
    if rows and rows[0][AGGREGATED]:  # an aggregate has hosts
        zone = settings.default_availability_zone
        _add_aggregates(states, _aggregates_by_host(session), zone)
    if with_pci_pools:
        with_pci = [s for s, row in zip(states, rows, strict=True) if row[PCI_FREE]]
        if with_pci:
            _add_pci_pools(session, with_pci)
    else:
        for state, row in zip(states, rows, strict=True):
            state.pci_free_count = int(row[PCI_FREE] or 0)
    if with_instances and states:
        _add_instances(session, states)
    if with_stats and states:
        _add_instance_stats(session, states)
    if placement_of is None or not rows:
        return Candidates(states, prefilter)
    has_row, host, node = rows[0][AGGREGATED + 1 :]
    return Candidates(states, prefilter, True, (host, node) if has_row else None)


def _fetch_tuples(session: Session, query: Select[Any], params: dict[str, Any]) -> list[Any]:
    """The candidates' rows as the driver returns them (plain tuples).

    NOTE: no SQLAlchemy ``Row`` per candidate (a row object and its processors: ~1 ms of a
    10,000-host decision on SQLite, for up to max_placement_results rows). Nothing read
    from them needs a processor: integers, floats and text come as the scheduler reads
    them, and the booleans (``EXISTS``), 0/1 on SQLite, are only tested for truth."""
    result = session.connection().execute(query, params)
    try:
        return list(result.cursor.fetchall())
    finally:
        result.close()


def _parameters(
    settings: Settings,
    request: ResourceRequest | None,
    hosts: Sequence[str],
    placement_of: str | None,
) -> dict[str, Any]:
    """The bound parameters of ``candidate_sql.candidates_query`` for this load."""
    now = utcnow()
    down = dt.timedelta(seconds=settings.effective_service_down_time)
    params: dict[str, Any] = {"up_from": now - down, "up_to": now + down}
    if hosts:
        params["hosts"] = list(hosts)
    elif request is not None:
        params.update(
            vcpus=request.vcpus,
            memory_mb=request.memory_mb,
            disk_gb=request.disk_gb,
            limit=settings.scheduler.max_placement_results,
        )
    if placement_of is not None:
        params["placement_uuid"] = placement_of
    return params


def _host_states(rows: Sequence[Any], settings: Settings) -> list[HostState]:
    """One HostState per row of ``candidate_sql.candidates_query`` (its column order)."""
    # What depends only on a node's stats text, or on its CPU description and hypervisor
    # type, is worked out once per distinct value (most nodes of a cloud share them).
    stats_memo: dict[str | None, tuple[dict[str, Any], int]] = {}
    cpu_memo: dict[tuple[str | None, str | None], _CpuFacts] = {}
    zone = settings.default_availability_zone
    states: list[HostState] = []
    append = states.append
    for row in rows:
        (
            node_id,
            host,
            nodename,
            hv_type,
            hv_version,
            cpu_text,
            stats_text,
            metrics_text,
            vcpus,
            vcpus_used,
            memory_mb,
            memory_used,
            local_gb,
            local_gb_used,
            reserved_vcpus,
            reserved_memory_mb,
            reserved_disk_gb,
            cpu_ratio,
            ram_ratio,
            disk_ratio,
            node_uuid,
            host_ip,
            up,
            disabled,
            num_instances,
            num_io_ops,
        ) = row[:PCI_FREE]  # then PCI_FREE, AGGREGATED and the placement: load_candidates
        parsed = stats_memo.get(stats_text)
        if parsed is None:
            # Nova's resource tracker always reports failed_builds (0 until one fails).
            stats = {"failed_builds": 0, **_parse_json(stats_text or "{}")}
            parsed = stats_memo[stats_text] = (stats, int(stats.get("failed_builds", 0)))
        stats, failed_builds = parsed
        facts = cpu_memo.get((cpu_text, hv_type))
        if facts is None:
            facts = cpu_memo[(cpu_text, hv_type)] = _cpu_facts(cpu_text, hv_type)
        cpu_info, hv_type, supported = facts
        # NOTE: positional, in HostState's field order: keywords cost twice as much, and
        # this runs for each of up to max_placement_results candidates per decision.
        append(
            HostState(
                host,
                nodename,
                node_id,
                vcpus,
                vcpus_used,
                memory_mb,
                memory_used,
                local_gb,
                local_gb_used,
                reserved_vcpus,
                reserved_memory_mb,
                reserved_disk_gb,
                cpu_ratio,
                ram_ratio,
                disk_ratio,
                bool(up),  # service_up
                bool(disabled),  # service_disabled
                num_instances,
                num_io_ops,
                failed_builds,
                set(),  # instances: _add_instances, when the request needs them
                {},  # pci_pools: _add_pci_pools, for the nodes with free devices
                (),  # aggregates: _add_aggregates
                zone,  # availability_zone: the default unless an aggregate says
                hv_type,
                hv_version or 0,
                cpu_info,
                stats,  # shared by the hosts of one text: _add_instance_stats replaces it
                supported,
                node_uuid,
                host_ip,  # host_ip_text: parsed when a filter reads host_ip
                metrics_text or "[]",
            )
        )
    return states


#: A node's parsed CPU description, its hypervisor type ("" for none) and the
#: supported instances they give (``_cpu_facts``).
_CpuFacts = tuple[dict[str, Any], str, tuple[tuple[str, str, str], ...]]


def _cpu_facts(cpu_text: str | None, hv_type: str | None) -> _CpuFacts:
    cpu_info = _parse_cpu_info(cpu_text or "{}")
    hv_type = hv_type or ""
    arch = cpu_info.get("arch") or "x86_64"
    return cpu_info, hv_type, _supported_instances(arch, hv_type.lower())


def _add_aggregates(
    states: list[HostState], by_host: dict[str, tuple[AggregateInfo, ...]], default_zone: str
) -> None:
    if not by_host:
        return
    for state in states:
        aggregates = by_host.get(state.host)
        if aggregates:
            state.aggregates = aggregates
            state.availability_zone = _availability_zone(aggregates, default_zone)


def _availability_zone(aggregates: tuple[AggregateInfo, ...], default_zone: str) -> str:
    zones = sorted(
        a.metadata["availability_zone"] for a in aggregates if "availability_zone" in a.metadata
    )
    return ",".join(zones) if zones else default_zone


def _aggregates_by_host(session: Session) -> dict[str, tuple[AggregateInfo, ...]]:
    """Every aggregate that has hosts, with its metadata, in one query (usually none)."""
    rows = session.connection().execute(aggregates_query()).all()
    if not rows:
        return {}
    names: dict[int, str] = {}
    hosts: dict[int, set[str]] = {}
    metadata: dict[int, dict[str, str]] = {}
    for aggregate_id, name, host, key, value in rows:
        names[aggregate_id] = name
        hosts.setdefault(aggregate_id, set()).add(host)
        meta = metadata.setdefault(aggregate_id, {})
        if key is not None:
            meta[key] = value
    by_host: dict[str, list[AggregateInfo]] = {}
    for aggregate_id in sorted(names):
        members = frozenset(hosts[aggregate_id])
        info = AggregateInfo(aggregate_id, names[aggregate_id], members, metadata[aggregate_id])
        for host in info.hosts:
            by_host.setdefault(host, []).append(info)
    return {host: tuple(infos) for host, infos in by_host.items()}


def _add_instances(session: Session, states: list[HostState]) -> None:
    """Instance uuids per host, with the counts recomputed from the same rows (so the
    three agree even under read committed)."""
    hosts = sorted({s.host for s in states})
    query = instances_query(session.get_bind().dialect.name)
    rows = session.connection().execute(query, {ONE_OF: hosts})
    found: dict[str, tuple[set[str], int]] = {}
    for host, uuid, vm_state, task_state in rows:
        uuids, io_ops = found.get(host, (set(), 0))
        uuids.add(uuid)
        io_ops += io_weight(vm_state, task_state)
        found[host] = (uuids, io_ops)
    for state in states:
        uuids, io_ops = found.get(state.host, (set(), 0))
        state.instances, state.num_instances, state.num_io_ops = set(uuids), len(uuids), io_ops


def _add_instance_stats(session: Session, states: list[HostState]) -> None:
    """The resource tracker's instance counts into each host's ``stats``, from one
    grouped query over the hosts' live instances."""
    hosts = sorted({s.host for s in states})
    groups: dict[str, list[Any]] = {}
    query = instance_stats_query(session.get_bind().dialect.name)
    for host, *group in session.connection().execute(query, {ONE_OF: hosts}):
        groups.setdefault(host, []).append(group)
    for state in states:
        # A new dict: the hosts of one stats text share the one ``_host_states`` parsed.
        state.stats = {**state.stats, **instance_stats(groups.get(state.host, ()))}


def _add_pci_pools(session: Session, states: list[HostState]) -> None:
    """Free passthrough devices by pool, for the hosts that have any (usually few)."""
    node_ids = [s.compute_node_id for s in states]
    query = pci_pools_query(session.get_bind().dialect.name)
    rows = session.connection().execute(query, {ONE_OF: node_ids}).all()
    pools: dict[int, dict[tuple[str, str, str], int]] = {}
    for node_id, vendor, product, dev_type, count in rows:
        pools.setdefault(node_id, {})[(vendor, product, dev_type)] = count
    for state in states:
        state.pci_pools = pools.get(state.compute_node_id, {})


def _parse_json(text: str) -> dict[str, Any]:
    return dict(json.loads(text) or {})


@functools.lru_cache(maxsize=256)
def _parse_cpu_info(text: str) -> dict[str, Any]:
    # Most nodes of a cloud share one CPU description: parse each distinct one once.
    return _parse_json(text)


@functools.lru_cache(maxsize=64)
def _supported_instances(arch: str, hv_type: str) -> tuple[tuple[str, str, str], ...]:
    # libvirt reports QEMU on a KVM host too; Nova's libvirt driver advertises both.
    if hv_type in ("qemu", "kvm"):
        return ((arch, "kvm", "hvm"), (arch, "qemu", "hvm"))
    return ((arch, hv_type, "hvm"),) if hv_type else ()
