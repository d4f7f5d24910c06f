from __future__ import annotations

import libvirt  # type: ignore[import-untyped]
import pytest

from virt import power_state


@pytest.mark.parametrize(
    ("libvirt_state", "expected"),
    [
        (libvirt.VIR_DOMAIN_NOSTATE, power_state.NOSTATE),
        (libvirt.VIR_DOMAIN_RUNNING, power_state.RUNNING),
        (libvirt.VIR_DOMAIN_BLOCKED, power_state.RUNNING),
        (libvirt.VIR_DOMAIN_PAUSED, power_state.PAUSED),
        (libvirt.VIR_DOMAIN_SHUTDOWN, power_state.SHUTDOWN),
        (libvirt.VIR_DOMAIN_SHUTOFF, power_state.SHUTDOWN),
        (libvirt.VIR_DOMAIN_CRASHED, power_state.CRASHED),
        (libvirt.VIR_DOMAIN_PMSUSPENDED, power_state.SUSPENDED),
    ],
)
def test_from_libvirt_maps_every_libvirt_state(libvirt_state: int, expected: int) -> None:
    assert power_state.from_libvirt(libvirt_state) == expected


def test_unknown_libvirt_state_is_nostate() -> None:
    assert power_state.from_libvirt(99) == power_state.NOSTATE


def test_copied_libvirt_constants_match_the_bindings() -> None:
    for name in ("NOSTATE", "RUNNING", "BLOCKED", "PAUSED", "SHUTDOWN", "SHUTOFF", "CRASHED"):
        assert getattr(power_state, f"VIR_DOMAIN_{name}") == getattr(libvirt, f"VIR_DOMAIN_{name}")
    assert power_state.VIR_DOMAIN_PMSUSPENDED == libvirt.VIR_DOMAIN_PMSUSPENDED


def test_names_are_novas() -> None:
    assert power_state.NAMES == {
        0: "pending",
        1: "running",
        3: "paused",
        4: "shutdown",
        6: "crashed",
        7: "suspended",
    }
