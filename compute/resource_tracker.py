"""The resource tracker: records each node the driver reports and keeps its derived
usage equal to its allocations (Nova's ``update_available_resource``)."""

from __future__ import annotations

import json
import logging
import math
import uuid as uuid_module

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.claims import write_usage
from models import ComputeNode, utcnow
from novaq.settings import Settings
from virt.driver import HostResources

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


def record_compute_node(
    session: Session, host: str, resources: HostResources, settings: Settings
) -> ComputeNode:
    """Create or refresh the compute node row from the hypervisor's view, then rewrite its
    derived usage from allocations under the generation compare-and-swap."""
    node = get_node(session, host, resources.hypervisor_hostname)
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
    for name, value in ratios.items():
        setattr(node, name, value)
    node.reserved_vcpus = settings.reserved_host_cpus
    node.reserved_memory_mb = settings.reserved_host_memory_mb
    node.reserved_disk_gb = math.ceil(settings.reserved_host_disk_mb / 1024)
    node.updated_at = utcnow()
    session.flush()
    write_usage(session, node, node.generation)
    LOG.info(
        "Hypervisor view of %s/%s: vcpus=%d memory_mb=%d local_gb=%d pci_devices=%d",
        host,
        resources.hypervisor_hostname,
        resources.vcpus,
        resources.memory_mb,
        resources.local_gb,
        len(resources.pci_devices),
    )
    return node
