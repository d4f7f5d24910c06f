"""Hypervisor lifecycle events as compute sees them (Nova's ``nova/virt/event.py``).

Owns ``LifecycleEvent`` and its transitions, and the power state each transition
implies. Refuses to know libvirt: ``virt.libvirt.events`` translates libvirt's domain
events into these.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Final

from virt import power_state

STARTED: Final = 0
STOPPED: Final = 1
PAUSED: Final = 2
RESUMED: Final = 3
SUSPENDED: Final = 4

NAMES: Final[dict[int, str]] = {
    STARTED: "Started",
    STOPPED: "Stopped",
    PAUSED: "Paused",
    RESUMED: "Resumed",
    SUSPENDED: "Suspended",
}

#: The power state a guest is in once the transition happened (Nova's
#: ``handle_lifecycle_event`` table).
POWER_STATES: Final[dict[int, int]] = {
    STARTED: power_state.RUNNING,
    STOPPED: power_state.SHUTDOWN,
    PAUSED: power_state.PAUSED,
    RESUMED: power_state.RUNNING,
    SUSPENDED: power_state.SUSPENDED,
}


@dataclass(frozen=True, slots=True)
class LifecycleEvent:
    """Guest ``uuid`` went through ``transition`` at ``timestamp`` (epoch seconds)."""

    uuid: str
    transition: int
    timestamp: float = field(default_factory=time.time)

    @property
    def name(self) -> str:
        return NAMES.get(self.transition, str(self.transition))

    @property
    def power_state(self) -> int:
        return POWER_STATES.get(self.transition, power_state.NOSTATE)
