"""The resource tracker: records each node the driver reports and keeps its derived
usage equal to its allocations (Nova's ``update_available_resource``)."""

from __future__ import annotations

import json
import logging
import math
import uuid as uuid_module
from typing import Any

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from compute import monitors, notifications
from compute.claims import retry_on_conflict, store_usage
from compute.heal import Domain, heal_node
from compute.host_ip import host_ip, ip_text
from compute.pci import sync_devices
from compute.sessions import Sessions
from compute.steady_usage import steady_usage
from models import Allocation, ComputeNode, PciDevice, ResourceHeal, utcnow
from novaq.settings import Settings
from virt.driver import ComputeDriver, HostResources

LOG = logging.getLogger(__name__)


def _ratios(settings: Settings, node: ComputeNode | None) -> dict[str, float]:
    """Nova's rule: ``*_allocation_ratio`` overrides when set; otherwise a new node gets
    ``initial_*`` and an existing node keeps what it has."""
    pairs = {
        "cpu_allocation_ratio": (
            settings.cpu_allocation_ratio,
            settings.initial_cpu_allocation_ratio,
        ),
        "ram_allocation_ratio": (
            settings.ram_allocation_ratio,
            settings.initial_ram_allocation_ratio,
        ),
        "disk_allocation_ratio": (
            settings.disk_allocation_ratio,
            settings.initial_disk_allocation_ratio,
        ),
    }
    ratios = {}
    for name, (explicit, initial) in pairs.items():
        if explicit is not None:
            ratios[name] = explicit
        elif node is not None:
            ratios[name] = getattr(node, name)
        else:
            ratios[name] = initial
    return ratios


def get_node(session: Session, host: str, nodename: str) -> ComputeNode | None:
    return session.scalars(
        select(ComputeNode).where(
            ComputeNode.host == host,
            ComputeNode.hypervisor_hostname == nodename,
            ComputeNode.deleted == 0,
        )
    ).first()


#: Whether a node has device rows (live ones: ``compute.pci.sync_devices`` reads those).
_HOLDS_DEVICES = (
    exists()
    .where(PciDevice.compute_node_id == ComputeNode.id, PciDevice.deleted == 0)
    .correlate(ComputeNode)
    .label("holds_devices")
)


def host_nodes(session: Session, host: str) -> tuple[list[ComputeNode], set[int]]:
    """The host's live nodes, and the ids of those that have device rows, in one read."""
    rows = session.execute(
        select(ComputeNode, _HOLDS_DEVICES).where(
            ComputeNode.host == host, ComputeNode.deleted == 0
        )
    ).all()
    return [node for node, _ in rows], {node.id for node, holds in rows if holds}


def record_compute_node(
    session: Session,
    host: str,
    resources: HostResources,
    settings: Settings,
    nodes: list[ComputeNode] | None = None,
) -> ComputeNode:
    """Create or refresh the compute node row from the hypervisor's view (the caller rewrites
    its derived usage, see :func:`update_available_resource`). ``nodes``: the host's live
    nodes, when the caller has read them already."""
    if nodes is None:
        node = get_node(session, host, resources.hypervisor_hostname)
    else:
        name = resources.hypervisor_hostname
        node = next((n for n in nodes if n.hypervisor_hostname == name), None)
    ratios = _ratios(settings, node)
    if node is None:
        node = ComputeNode(
            uuid=str(uuid_module.uuid4()),
            host=host,
            hypervisor_hostname=resources.hypervisor_hostname,
            generation=0,
        )
        session.add(node)
    node.vcpus = resources.vcpus
    node.memory_mb = resources.memory_mb
    node.local_gb = resources.local_gb
    node.hypervisor_type = resources.hypervisor_type
    node.hypervisor_version = resources.hypervisor_version
    node.cpu_info = json.dumps(resources.cpu_info, sort_keys=True)
    node.host_ip = ip_text(host_ip(settings, host))
    for name, value in ratios.items():
        setattr(node, name, value)
    node.reserved_vcpus = settings.reserved_host_cpus
    node.reserved_memory_mb = settings.reserved_host_memory_mb
    node.reserved_disk_gb = math.ceil(settings.reserved_host_disk_mb / 1024)
    touch_if_changed(session, node)
    session.flush()
    return node


def touch_if_changed(session: Session, node: ComputeNode) -> None:
    """Set the node's ``updated_at`` if the audit changed any of its columns (or made it).

    NOTE: as Nova's ``_update`` saves the compute node only when a field changed
    (``_resource_change``): ``updated_at`` says when the node last changed, not that the
    audit ran (a service's liveness says that), and a steady audit writes nothing: no
    UPDATE, and a commit with nothing to flush to disk (issue 16, goal 3)."""
    if node in session.new or session.is_modified(node):
        node.updated_at = utcnow()


def update_available_resource(
    sessions: Sessions, driver: ComputeDriver, host: str, settings: Settings
) -> list[dict[str, Any]]:
    """Nova's resource audit for every node of this host: read the hypervisor, record the
    node, its monitors' metrics (``compute.monitors``) and its PCI devices, heal its
    allocations from the instances, moves and orphan domains on it, remove nodes the
    driver no longer reports. Returns the heals made."""
    resources = driver.get_available_resource()
    # Sizes of every guest without reading its XML; the few the heal would count as
    # orphans are asked about again (exist, and are this host's) once the database is read.
    domains = {guest.uuid: guest for guest in driver.list_guest_usage()}
    samples = monitors.read_samples(settings.compute_monitors, driver)
    LOG.info(
        "Hypervisor/Node resource view: name=%s free_ram=%dMB free_disk=%dGB free_vcpus=%d "
        "pci_devices=%s domains listed=%d",
        resources.hypervisor_hostname,
        resources.memory_mb - sum(d.memory_mb for d in domains.values()),
        resources.local_gb,
        resources.vcpus - sum(d.vcpus for d in domains.values()),
        [d.address for d in resources.pci_devices],
        len(domains),
    )

    def audit(session: Session) -> list[dict[str, Any]]:
        nodes, with_devices = host_nodes(session, host)
        node = record_compute_node(session, host, resources, settings, nodes)
        node.metrics = monitors.metrics_json(samples, node.metrics, utcnow())
        touch_if_changed(session, node)  # (new metrics: written with the next flush)
        # NOTE: only a node with device rows, or whose hypervisor reports devices, has any
        # to sync: a host without PCI passthrough (most) reads none (issue 16, goal 3).
        if resources.pci_devices or node.id in with_devices:
            sync_devices(session, node.id, resources.pci_devices, settings)
        generation = node.generation  # read first, as the heal does
        steady = steady_usage(session, node, domains, driver.owns_guest)
        if steady is None:
            heals = [_heal_dict(h) for h in heal_node(session, node, domains, driver.owns_guest)]
        else:  # nothing to heal: the derived usage is written only if it is stale
            heals = []
            store_usage(session, node, generation, *steady)
        reported = set(driver.get_available_nodes())
        heals += _delete_vanished_nodes(session, host, reported, nodes)
        if steady is None:
            session.refresh(node)  # the usage the heal wrote, for the log below
        final[:] = [] if node.deleted else [_final_view(node)]
        stored[:] = [] if node.deleted else [(node.hypervisor_hostname, node.metrics, node.host_ip)]
        return heals

    final: list[tuple[Any, ...]] = []
    stored: list[tuple[str, str, str | None]] = []
    heals = retry_on_conflict(sessions, audit)
    for nodename, metrics, node_ip in stored:  # after the commit, as Nova's metrics.update
        payload = monitors.metrics_payload(host, nodename, metrics, node_ip or "")
        if payload is not None:
            notifications.publish("metrics.update", payload, host)
    for view in final:
        LOG.info(
            "Final resource view: name=%s phys_ram=%dMB used_ram=%dMB phys_disk=%dGB "
            "used_disk=%dGB total_vcpus=%d used_vcpus=%d heals=%d",
            *view,
            len(heals),
        )
    return heals


def _final_view(node: ComputeNode) -> tuple[Any, ...]:
    return (
        node.hypervisor_hostname,
        node.memory_mb,
        node.memory_mb_used,
        node.local_gb,
        node.local_gb_used,
        node.vcpus,
        node.vcpus_used,
    )


def hypervisor_domains(driver: ComputeDriver) -> dict[str, Domain]:
    """This host's guests and their sizes (a guest undefined meanwhile is left out)."""
    owned = set(driver.list_instance_uuids())
    return {guest.uuid: guest for guest in driver.list_guest_usage() if guest.uuid in owned}


def _delete_vanished_nodes(
    session: Session, host: str, reported: set[str], nodes: list[ComputeNode]
) -> list[dict[str, Any]]:
    heals = []
    for node in nodes:
        if node.hypervisor_hostname in reported:
            continue
        session.execute(delete(Allocation).where(Allocation.compute_node_id == node.id))
        node.deleted, node.deleted_at = node.id, utcnow()
        heal = ResourceHeal(
            host=host,
            node=node.hypervisor_hostname,
            consumer_uuid=None,
            action="node_deleted",
            resources="{}",
            reason="the hypervisor no longer reports this node",
        )
        session.add(heal)
        LOG.warning(
            "Deleted compute node %s/%s: no longer reported", host, node.hypervisor_hostname
        )
        heals.append(_heal_dict(heal))
    return heals


def _heal_dict(heal: ResourceHeal) -> dict[str, Any]:
    return {
        "host": heal.host,
        "node": heal.node,
        "consumer_uuid": heal.consumer_uuid,
        "action": heal.action,
        "resources": heal.resources,
        "reason": heal.reason,
    }
