"""The accounting check (``novaq audit``): per node, usage by allocations, by the live
instances and moves, and by the hypervisor, with every discrepancy classified.

- ``leak``: the accounting is wrong: an allocation or PCI device held by a consumer that
  is not live, a live consumer without its allocation, a wrong amount, derived ``*_used``
  columns out of step with the allocations, allocations beyond capacity.
- ``warning``: the world differs from the database, but the accounting covers it: an
  orphan guest (counted as used by ``update_available_resource``), an instance whose guest
  the hypervisor lacks, a host whose hypervisor could not be asked.
- ``overcommit``: free figures below zero because allocation ratios above 1 let usage pass
  the physical totals. Capacity is ``(total - reserved) * ratio``; ``free = total - used``
  ignores the ratio, as Nova's does, so it goes negative by design, not by a leak.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.claims import allocation_usage, node_capacity, node_reserved, node_totals
from compute.heal import node_allocations
from compute.pci import held_devices
from compute.usage import expected_consumers
from models import ComputeNode, Instance, PciDevice
from models.allocation import RESOURCE_CLASSES
from models.pci_device import ALLOCATED, CLAIMED

LEAK, WARNING = "leak", "warning"
NEEDS_GUEST = ("active", "paused", "suspended", "stopped", "rescued", "resized", "error")


def _finding(severity: str, kind: str, consumer: str | None, detail: str) -> dict[str, Any]:
    return {"severity": severity, "kind": kind, "consumer": consumer, "detail": detail}


def _sum(resources: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    total = dict.fromkeys(RESOURCE_CLASSES, 0)
    for held in resources.values():
        for rc, n in held.items():
            total[rc] = total.get(rc, 0) + n
    return total


def audit_node(
    session: Session, node: ComputeNode, hypervisor: Mapping[str, Any] | None
) -> dict[str, Any]:
    expected = expected_consumers(session, node)
    actual = node_allocations(session, node.id)
    guests = {d["uuid"]: d for d in hypervisor["domains"]} if hypervisor else None
    findings: list[dict[str, Any]] = []
    findings += _check_allocations(session, expected, actual, guests)
    findings += _check_columns(session, node)
    findings += _check_pci(session, node, expected)
    if guests is None:
        findings.append(
            _finding(
                WARNING,
                "hypervisor_unavailable",
                None,
                "the host did not answer; the hypervisor view is missing",
            )
        )
    else:
        findings += _check_guests(session, expected, guests)
    by_expected = {c: e.resources for c, e in expected.items()}
    report = {
        "host": node.host,
        "node": node.hypervisor_hostname,
        "totals": node_totals(node),
        "reserved": node_reserved(node),
        "capacity": node_capacity(node),
        "usage": {
            "allocations": _sum(actual),
            "instances_and_migrations": _sum(by_expected),
            "hypervisor": None
            if guests is None
            else {
                "VCPU": sum(g["vcpus"] for g in guests.values()),
                "MEMORY_MB": sum(g["memory_mb"] for g in guests.values()),
                "guests": len(guests),
            },
        },
        "free": {
            "VCPU": node.vcpus - node.vcpus_used,
            "MEMORY_MB": node.free_ram_mb,
            "DISK_GB": node.free_disk_gb,
        },
        "overcommit": _overcommit(node),
        "discrepancies": findings,
    }
    report["leaks"] = sum(f["severity"] == LEAK for f in findings)
    return report


def _check_allocations(
    session: Session,
    expected: Mapping[str, Any],
    actual: Mapping[str, dict[str, int]],
    guests: Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    findings = []
    for consumer in sorted(actual.keys() - expected.keys()):
        if guests is not None and consumer in guests and not _is_live_instance(session, consumer):
            findings.append(
                _finding(
                    WARNING,
                    "orphan_domain",
                    consumer,
                    f"guest unknown to the database, counted as used: {actual[consumer]}",
                )
            )
        else:
            findings.append(
                _finding(
                    LEAK,
                    "leaked_allocation",
                    consumer,
                    f"held {actual[consumer]} with no live consumer on this node",
                )
            )
    for consumer in sorted(expected.keys() - actual.keys()):
        findings.append(
            _finding(
                LEAK,
                "missing_allocation",
                consumer,
                f"{expected[consumer].kind} should hold {expected[consumer].resources}",
            )
        )
    for consumer in sorted(expected.keys() & actual.keys()):
        if expected[consumer].resources != actual[consumer]:
            findings.append(
                _finding(
                    LEAK,
                    "wrong_allocation",
                    consumer,
                    f"holds {actual[consumer]}, should hold {expected[consumer].resources}",
                )
            )
    return findings


def _check_columns(session: Session, node: ComputeNode) -> list[dict[str, Any]]:
    usage, reserved = allocation_usage(session, node.id), node_reserved(node)
    columns = {
        "VCPU": node.vcpus_used,
        "MEMORY_MB": node.memory_mb_used,
        "DISK_GB": node.local_gb_used,
    }
    findings = []
    for rc in RESOURCE_CLASSES:
        if columns[rc] != reserved[rc] + usage[rc]:
            findings.append(
                _finding(
                    LEAK,
                    "stale_usage",
                    None,
                    f"{rc} used column {columns[rc]} != reserved {reserved[rc]} "
                    f"+ allocations {usage[rc]}",
                )
            )
        if usage[rc] > node_capacity(node)[rc]:
            findings.append(
                _finding(
                    LEAK,
                    "over_capacity",
                    None,
                    f"{rc} allocations {usage[rc]} exceed capacity {node_capacity(node)[rc]:g}",
                )
            )
    return findings


def _check_pci(
    session: Session, node: ComputeNode, expected: Mapping[str, Any]
) -> list[dict[str, Any]]:
    findings = []
    busy = session.scalars(
        select(PciDevice).where(
            PciDevice.compute_node_id == node.id,
            PciDevice.status.in_((CLAIMED, ALLOCATED)),
            PciDevice.deleted == 0,
        )
    )
    for device in busy:
        if device.consumer_uuid not in expected:
            findings.append(
                _finding(
                    LEAK,
                    "leaked_pci",
                    device.consumer_uuid,
                    f"device {device.address} is {device.status} with no live consumer",
                )
            )
    for consumer, want in expected.items():
        held = len(held_devices(session, consumer, node.id))
        if held != want.request.pci_count:
            findings.append(
                _finding(
                    LEAK,
                    "wrong_pci",
                    consumer,
                    f"holds {held} PCI devices, should hold {want.request.pci_count}",
                )
            )
    return findings


def _check_guests(
    session: Session, expected: Mapping[str, Any], guests: Mapping[str, Any]
) -> list[dict[str, Any]]:
    findings = []
    instance_uuids = {e.instance_uuid for e in expected.values()}
    rows: Iterable[Instance] = (
        session.scalars(select(Instance).where(Instance.uuid.in_(instance_uuids)))
        if instance_uuids
        else []
    )
    for instance in rows:
        if (
            instance.vm_state in NEEDS_GUEST
            and instance.uuid not in guests
            and instance.task_state is None
        ):
            findings.append(
                _finding(
                    WARNING,
                    "missing_domain",
                    instance.uuid,
                    f"{instance.vm_state} instance has no guest on the hypervisor",
                )
            )
    for uuid in sorted(guests.keys() - instance_uuids):
        if not _is_live_instance(session, uuid):
            findings.append(
                _finding(
                    WARNING,
                    "orphan_domain",
                    uuid,
                    "the hypervisor runs a guest the database does not know",
                )
            )
    return findings


def _is_live_instance(session: Session, uuid: str) -> bool:
    return (
        session.scalars(
            select(Instance.id).where(Instance.uuid == uuid, Instance.deleted == 0)
        ).first()
        is not None
    )


def _overcommit(node: ComputeNode) -> list[str]:
    notes = []
    for rc, total, used, ratio in (
        ("VCPU", node.vcpus, node.vcpus_used, node.cpu_allocation_ratio),
        ("MEMORY_MB", node.memory_mb, node.memory_mb_used, node.ram_allocation_ratio),
        ("DISK_GB", node.local_gb, node.local_gb_used, node.disk_allocation_ratio),
    ):
        if used > total:
            notes.append(
                f"{rc}: {used} used of {total} physical (allocation ratio {ratio:g}); "
                "free is negative by overcommit, not by a leak"
            )
    return notes


def audit_nodes(
    session: Session,
    hypervisors: Mapping[str, Mapping[str, Any] | None],
    hosts: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Every live node's audit (only ``hosts``' nodes, when given)."""
    query = select(ComputeNode).where(ComputeNode.deleted == 0).order_by(ComputeNode.host)
    if hosts is not None:
        query = query.where(ComputeNode.host.in_(hosts))
    nodes = session.scalars(query)
    reports = [audit_node(session, n, hypervisors.get(n.host)) for n in nodes]
    return {"nodes": reports, "leaks": sum(r["leaks"] for r in reports)}
