from __future__ import annotations

import pytest

from compute.states import api_status


@pytest.mark.parametrize(
    ("vm_state", "task_state", "status"),
    [
        ("building", "scheduling", "BUILD"),
        ("building", "spawning", "BUILD"),
        ("active", None, "ACTIVE"),
        ("active", "deleting", "ACTIVE"),
        ("active", "rebooting", "REBOOT"),
        ("active", "rebooting_hard", "HARD_REBOOT"),
        ("active", "resize_prep", "RESIZE"),
        ("active", "migrating", "MIGRATING"),
        ("stopped", None, "SHUTOFF"),
        ("stopped", "resize_finish", "RESIZE"),
        ("resized", None, "VERIFY_RESIZE"),
        ("resized", "resize_reverting", "REVERT_RESIZE"),
        ("paused", None, "PAUSED"),
        ("suspended", None, "SUSPENDED"),
        ("rescued", None, "RESCUE"),
        ("error", None, "ERROR"),
        ("error", "rebuilding", "REBUILD"),
        ("deleted", None, "DELETED"),
        ("soft-delete", None, "SOFT_DELETED"),
        ("shelved", None, "SHELVED"),
        ("shelved_offloaded", None, "SHELVED_OFFLOADED"),
    ],
)
def test_api_status_follows_novas_state_map(
    vm_state: str, task_state: str | None, status: str
) -> None:
    assert api_status(vm_state, task_state) == status
