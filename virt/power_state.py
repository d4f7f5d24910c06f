"""Nova's power states and the mapping from libvirt's domain states.

The integers stored in ``instances.power_state`` are ``models.states.PowerState`` (Nova's
``nova/compute/power_state.py``); this module keeps their short names (``power_state.RUNNING``)
and owns the one translation from libvirt's ``VIR_DOMAIN_*`` states. Refuses to import
``libvirt``: the libvirt values are copied here (they are part of libvirt's stable ABI) so
that compute and the scheduler can use power states without the bindings.
"""

from __future__ import annotations

from typing import Final

from models.states import PowerState

NOSTATE: Final = PowerState.NOSTATE
RUNNING: Final = PowerState.RUNNING
PAUSED: Final = PowerState.PAUSED
SHUTDOWN: Final = PowerState.SHUTDOWN
CRASHED: Final = PowerState.CRASHED
SUSPENDED: Final = PowerState.SUSPENDED

#: A guest that is down: shut off or crashed (the pair Nova's checks name together).
OFF: Final = frozenset((SHUTDOWN, CRASHED))
#: A guest that does not run: down, or missing altogether.
NOT_RUNNING: Final = frozenset((NOSTATE, *OFF))

NAMES: Final[dict[int, str]] = {
    NOSTATE: "pending",
    RUNNING: "running",
    PAUSED: "paused",
    SHUTDOWN: "shutdown",
    CRASHED: "crashed",
    SUSPENDED: "suspended",
}

# libvirt's virDomainState values (libvirt-domain.h).
VIR_DOMAIN_NOSTATE: Final = 0
VIR_DOMAIN_RUNNING: Final = 1
VIR_DOMAIN_BLOCKED: Final = 2
VIR_DOMAIN_PAUSED: Final = 3
VIR_DOMAIN_SHUTDOWN: Final = 4
VIR_DOMAIN_SHUTOFF: Final = 5
VIR_DOMAIN_CRASHED: Final = 6
VIR_DOMAIN_PMSUSPENDED: Final = 7

_FROM_LIBVIRT: Final[dict[int, PowerState]] = {
    VIR_DOMAIN_NOSTATE: NOSTATE,
    VIR_DOMAIN_RUNNING: RUNNING,
    VIR_DOMAIN_BLOCKED: RUNNING,  # blocked on I/O is still running, as Nova says
    VIR_DOMAIN_PAUSED: PAUSED,
    VIR_DOMAIN_SHUTDOWN: SHUTDOWN,
    VIR_DOMAIN_SHUTOFF: SHUTDOWN,
    VIR_DOMAIN_CRASHED: CRASHED,
    VIR_DOMAIN_PMSUSPENDED: SUSPENDED,
}


def from_libvirt(state: int) -> PowerState:
    """Return Nova's power state for a libvirt domain state; unknown states are NOSTATE."""
    return _FROM_LIBVIRT.get(state, NOSTATE)
