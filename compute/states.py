"""Nova's two state axes (``vm_state`` stable, ``task_state`` in flight) and the API
status derived from them (``nova/api/openstack/common.py: _STATE_MAP``)."""

from __future__ import annotations

from models.states import TaskState, VmState

__all__ = ["TaskState", "VmState", "api_status"]

_REBOOT = frozenset({"rebooting", "reboot_pending", "reboot_started"})
_HARD_REBOOT = frozenset({"rebooting_hard", "reboot_pending_hard", "reboot_started_hard"})
_REBUILD = frozenset({"rebuilding", "rebuild_block_device_mapping", "rebuild_spawning"})
_RESIZING = frozenset({"resize_prep", "resize_migrating", "resize_migrated", "resize_finish"})

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


#: (vm_state, task_states) -> the status they show instead of the vm_state's default.
_TASK_STATUS: tuple[tuple[str, frozenset[str], str], ...] = (
    ("active", _REBOOT, "REBOOT"),
    ("active", _HARD_REBOOT, "HARD_REBOOT"),
    ("active", frozenset({"updating_password"}), "PASSWORD"),
    ("active", _REBUILD, "REBUILD"),
    ("active", frozenset({"migrating"}), "MIGRATING"),
    ("active", _RESIZING, "RESIZE"),
    ("stopped", _RESIZING, "RESIZE"),
    ("stopped", _REBUILD, "REBUILD"),
    ("resized", frozenset({"resize_reverting"}), "REVERT_RESIZE"),
    ("paused", frozenset({"migrating"}), "MIGRATING"),
    ("error", _REBUILD, "REBUILD"),
)


def api_status(vm_state: str, task_state: str | None) -> str:
    """The Nova API status for a (vm_state, task_state) pair."""
    task = task_state or ""
    for state, tasks, status in _TASK_STATUS:
        if vm_state == state and task in tasks:
            return status
    return _DEFAULT_STATUS.get(vm_state, "UNKNOWN")
