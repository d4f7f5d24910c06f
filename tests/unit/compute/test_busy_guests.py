"""``compute.busy_guests``: an instance stays busy while any step of the process holds
it, with the task_state the first one left."""

from __future__ import annotations

import pytest

from compute import busy_guests

UUID = "0b7e9a52-6f1d-4c3e-9a8b-7d6c5e4f3a21"


def test_busy_while_any_step_holds_it() -> None:
    assert busy_guests.task_of(UUID) is None
    with busy_guests.acting(UUID, "spawning"):
        with busy_guests.acting(UUID, "deleting"):
            assert busy_guests.task_of(UUID) == "spawning"
        assert busy_guests.task_of(UUID) == "spawning"
    assert busy_guests.task_of(UUID) is None


def test_a_failing_act_leaves_it() -> None:
    with pytest.raises(RuntimeError), busy_guests.acting(UUID, "pausing"):
        raise RuntimeError("act failed")
    assert busy_guests.task_of(UUID) is None
