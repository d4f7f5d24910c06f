"""Nova's two state axes (``vm_state`` stable, ``task_state`` in flight) and the API
status derived from them (``nova/api/openstack/common.py: _STATE_MAP``)."""

from __future__ import annotations

from enum import StrEnum


class VmState(StrEnum):
    ACTIVE = "active"
    BUILDING = "building"
    PAUSED = "paused"
    SUSPENDED = "suspended"
    STOPPED = "stopped"
    RESCUED = "rescued"
    RESIZED = "resized"
    SOFT_DELETED = "soft-delete"
    DELETED = "deleted"
    ERROR = "error"
    SHELVED = "shelved"
    SHELVED_OFFLOADED = "shelved_offloaded"


class TaskState(StrEnum):
    SCHEDULING = "scheduling"
    BLOCK_DEVICE_MAPPING = "block_device_mapping"
    NETWORKING = "networking"
    SPAWNING = "spawning"
    DELETING = "deleting"
    SOFT_DELETING = "soft-deleting"
    RESIZE_PREP = "resize_prep"
    RESIZE_MIGRATING = "resize_migrating"
    RESIZE_MIGRATED = "resize_migrated"
    RESIZE_FINISH = "resize_finish"
    RESIZE_REVERTING = "resize_reverting"
    REBOOTING = "rebooting"
    REBOOT_PENDING = "reboot_pending"
    REBOOT_STARTED = "reboot_started"
    REBOOTING_HARD = "rebooting_hard"
    REBOOT_PENDING_HARD = "reboot_pending_hard"
    REBOOT_STARTED_HARD = "reboot_started_hard"
    PAUSING = "pausing"
    UNPAUSING = "unpausing"
    SUSPENDING = "suspending"
    RESUMING = "resuming"
    POWERING_OFF = "powering-off"
    POWERING_ON = "powering-on"
    RESCUING = "rescuing"
    UNRESCUING = "unrescuing"
    RESTORING = "restoring"
    SHELVING = "shelving"
    SHELVING_OFFLOADING = "shelving_offloading"
    UNSHELVING = "unshelving"
    MIGRATING = "migrating"
    REBUILDING = "rebuilding"
    UPDATING_PASSWORD = "updating_password"


_REBOOT = {"rebooting", "reboot_pending", "reboot_started"}
_HARD_REBOOT = {"rebooting_hard", "reboot_pending_hard", "reboot_started_hard"}
_REBUILD = {"rebuilding", "rebuild_block_device_mapping", "rebuild_spawning"}
_RESIZING = {"resize_prep", "resize_migrating", "resize_migrated", "resize_finish"}

_DEFAULT_STATUS = {
    "active": "ACTIVE",
    "building": "BUILD",
    "stopped": "SHUTOFF",
    "resized": "VERIFY_RESIZE",
    "paused": "PAUSED",
    "suspended": "SUSPENDED",
    "rescued": "RESCUE",
    "error": "ERROR",
    "deleted": "DELETED",
    "soft-delete": "SOFT_DELETED",
    "shelved": "SHELVED",
    "shelved_offloaded": "SHELVED_OFFLOADED",
}


def api_status(vm_state: str, task_state: str | None) -> str:
    """The Nova API status for a (vm_state, task_state) pair."""
    task = task_state or ""
    if vm_state == "active":
        if task in _REBOOT:
            return "REBOOT"
        if task in _HARD_REBOOT:
            return "HARD_REBOOT"
        if task == "updating_password":
            return "PASSWORD"
        if task in _REBUILD:
            return "REBUILD"
        if task == "migrating":
            return "MIGRATING"
        if task in _RESIZING:
            return "RESIZE"
    elif vm_state == "stopped":
        if task in _RESIZING:
            return "RESIZE"
        if task in _REBUILD:
            return "REBUILD"
    elif vm_state == "resized" and task == "resize_reverting":
        return "REVERT_RESIZE"
    elif vm_state == "paused" and task == "migrating":
        return "MIGRATING"
    elif vm_state == "error" and task in _REBUILD:
        return "REBUILD"
    return _DEFAULT_STATUS.get(vm_state, "UNKNOWN")
