"""Host facts the libvirt driver reports, from libvirt's XML and the file system:
PCI devices, Nova's ``cpu_info`` and the size of the disk holding ``instances_path``.

Pure functions over ``config_caps`` objects and ``NodeInfo``; no libvirt calls.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from virt.driver import PciDevice
from virt.libvirt.config_caps import LibvirtConfigCaps, LibvirtConfigNodeDevicePci
from virt.libvirt.host import NodeInfo

_DEV_TYPES: Final = {"virt_functions": "type-PF", "phys_function": "type-VF"}


def pci_device(xml: str) -> PciDevice:
    """A ``PciDevice`` from PCI node device XML."""
    dev = LibvirtConfigNodeDevicePci.from_xml(xml)
    dev_type = next((_DEV_TYPES[c] for c in dev.sub_capabilities if c in _DEV_TYPES), "type-PCI")
    return PciDevice(dev.address, dev.vendor_id, dev.product_id, dev.numa_node, dev_type)


def cpu_info(caps: LibvirtConfigCaps, node: NodeInfo) -> dict[str, Any]:
    """Nova's ``cpu_info``: arch, model, vendor, topology, features (JSON types only)."""
    topology = {
        "cells": node.nodes,
        "sockets": caps.host_topology.get("sockets", node.sockets),
        "cores": caps.host_topology.get("cores", node.cores),
        "threads": caps.host_topology.get("threads", node.threads),
    }
    return {
        "arch": caps.host_arch,
        "model": caps.host_model,
        "vendor": caps.host_vendor,
        "topology": topology,
        "features": sorted(caps.host_features),
    }


def filesystem_bytes(path: Path) -> int:
    """Size of the file system holding ``path`` (or its nearest existing parent)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    stats = os.statvfs(existing)
    return stats.f_frsize * stats.f_blocks
