"""Dict views of rows, as the API returns them (JSON types only)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from compute.instance_actions import latest_fault
from compute.pci import device_dict, instance_devices
from compute.states import api_status
from models import ComputeNode, Image, Instance, InstanceAction
from virt.power_state import NAMES as POWER_STATE_NAMES


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def image_names(session: Session, image_ids: set[str]) -> dict[str, str]:
    """Image id -> name, for the Image column of a list (one query, not one per row)."""
    query = select(Image.id, Image.name).where(Image.id.in_(image_ids))
    return {image_id: name for image_id, name in session.execute(query)}


def instance_dict(
    session: Session, instance: Instance, names: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A server as ``show`` and ``list`` return it. ``names``: image names already
    loaded (``image_names``); by default the server's own is looked up."""
    fault = latest_fault(session, instance.uuid)
    if names is None:
        names = image_names(session, {instance.image_ref})
    return {
        "uuid": instance.uuid,
        "name": instance.display_name,
        "description": instance.description,
        # The owner, under the names Nova's API shows it by.
        "tenant_id": instance.project_id,
        "user_id": instance.user_id,
        "metadata": instance.metadata_dict,
        "status": api_status(instance.vm_state, instance.task_state),
        "vm_state": instance.vm_state,
        "task_state": instance.task_state,
        # Nova's integer (OS-EXT-STS:power_state), and its name for people (the tables).
        "power_state": instance.power_state,
        "power_state_name": power_state_name(instance.power_state),
        "host": instance.host,
        "node": instance.node,
        "image": instance.image_ref,
        # Names for the list's Image and Flavor columns: the image as the registry names
        # it now, the flavor as it was when the server got it (Nova's original_name).
        "image_name": names.get(instance.image_ref),
        "flavor": instance.flavor.dump(),
        "flavor_name": instance.flavor.name,
        "pci_devices": [device_dict(d) for d in instance_devices(session, instance.uuid)],
        "availability_zone": instance.availability_zone,
        "locked": bool((instance.system_metadata or {}).get("locked")),
        "locked_reason": (instance.system_metadata or {}).get("locked_reason"),
        "created_at": _iso(instance.created_at),
        "launched_at": _iso(instance.launched_at),
        "terminated_at": _iso(instance.terminated_at),
        "deleted_at": _iso(instance.deleted_at),
        "fault": None
        if fault is None
        else {
            "code": fault.code,
            "message": fault.message,
            "details": fault.details,
            "host": fault.host,
            "created": _iso(fault.created_at),
        },
    }


def host_dict(node: ComputeNode, service: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "host": node.host,
        "node": node.hypervisor_hostname,
        "uuid": node.uuid,
        "hypervisor_type": node.hypervisor_type,
        "host_ip": node.host_ip,
        "vcpus": node.vcpus,
        "vcpus_used": node.vcpus_used,
        "memory_mb": node.memory_mb,
        "memory_mb_used": node.memory_mb_used,
        "local_gb": node.local_gb,
        "local_gb_used": node.local_gb_used,
        "free_ram_mb": node.free_ram_mb,
        "free_disk_gb": node.free_disk_gb,
        "running_vms": node.running_vms,
        "cpu_allocation_ratio": node.cpu_allocation_ratio,
        "ram_allocation_ratio": node.ram_allocation_ratio,
        "disk_allocation_ratio": node.disk_allocation_ratio,
        "generation": node.generation,
        "status": None if service is None else service["status"],
        "state": "down" if service is None else service["state"],
    }


def action_dict(action: InstanceAction) -> dict[str, Any]:
    return {
        "action": action.action,
        "request_id": action.request_id,
        "instance_uuid": action.instance_uuid,
        "start_time": _iso(action.start_time),
        "finish_time": _iso(action.finish_time),
        "message": action.message,
        "events": [
            {
                "event": e.event,
                "start_time": _iso(e.start_time),
                "finish_time": _iso(e.finish_time),
                "result": e.result,
                "host": e.host,
                "traceback": e.traceback,
            }
            for e in action.events
        ],
    }


#: Nova's server statuses (``nova/api/openstack/common.py: _STATE_MAP``), what ``wait`` waits for.
STATUSES = frozenset(
    [
        "ACTIVE",
        "BUILD",
        "DELETED",
        "ERROR",
        "HARD_REBOOT",
        "MIGRATING",
        "PASSWORD",
        "PAUSED",
        "REBOOT",
        "REBUILD",
        "RESCUE",
        "RESIZE",
        "REVERT_RESIZE",
        "SHELVED",
        "SHELVED_OFFLOADED",
        "SHUTOFF",
        "SOFT_DELETED",
        "SUSPENDED",
        "UNKNOWN",
        "VERIFY_RESIZE",
    ]
)


def power_state_name(power_state: int | None) -> str:
    """Nova's name of a power state (``running``, ``shutdown``, ...)."""
    return POWER_STATE_NAMES.get(power_state, "unknown") if power_state is not None else "unknown"
