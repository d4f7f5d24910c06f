"""What compute hands the driver for a power-off or a reboot (Nova's
``_get_power_off_values`` and the guest a reboot redefines).

A clean power-off (stop, shelve, shelve offload, resize, rescue) waits for the guest for
the image property ``os_shutdown_timeout`` seconds, as the boot API stashed it in
system_metadata (``image_os_shutdown_timeout``), else ``[DEFAULT] shutdown_timeout``;
an unclean one (``force_stop``, the power-state sync's stop of a guest that disagrees)
waits 0 s: the driver destroys at once. A value in system_metadata that is not a
non-negative integer is ignored with a warning (Nova's image property schema refuses it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from sqlalchemy.orm import Session

from compute.guest import guest_spec
from compute.instance_state import get_instance
from compute.pci import held_devices
from virt.driver import GuestSpec

LOG = logging.getLogger(__name__)

#: Nova's ``[DEFAULT] shutdown_timeout``, for callers that pass none.
DEFAULT_SHUTDOWN_TIMEOUT_S: Final = 60
SYSMETA_SHUTDOWN_TIMEOUT: Final = "image_os_shutdown_timeout"


def power_off_timeout(
    system_metadata: Mapping[str, Any] | None, default_s: int, clean_shutdown: bool = True
) -> int:
    """Seconds the driver may wait for a clean shutdown (0: destroy at once)."""
    if not clean_shutdown:
        return 0
    value = (system_metadata or {}).get(SYSMETA_SHUTDOWN_TIMEOUT)
    if value is None:
        return default_s
    try:
        timeout = int(value)
    except (TypeError, ValueError):
        timeout = -1
    if timeout < 0:
        LOG.warning("ignoring os_shutdown_timeout %r: not an integer >= 0", value)
        return default_s
    return timeout


def instance_power_off_timeout(
    session: Session, instance_uuid: str, default_s: int, clean_shutdown: bool = True
) -> int:
    """``power_off_timeout`` for the instance's own system_metadata."""
    if not clean_shutdown:
        return 0
    instance = get_instance(session, instance_uuid)
    return power_off_timeout(instance.system_metadata, default_s)


def current_guest_spec(session: Session, instance_uuid: str) -> GuestSpec:
    """The guest the instance is now (flavor, image, PCI devices it holds): what a hard
    reboot defines again, as Nova's ``_hard_reboot`` regenerates the domain XML."""
    instance = get_instance(session, instance_uuid)
    addresses = tuple(d.address for d in held_devices(session, instance_uuid))
    return guest_spec(session, instance, addresses)
