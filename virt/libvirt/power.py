"""Nova's waited power operations on a libvirt guest: clean shutdown and soft reboot.

``virDomainShutdown`` and ``virDomainReboot`` return before the guest has done anything
(and succeed even when the guest ignores ACPI), so Nova never trusts them: a clean
shutdown asks, polls the domain's state and asks again every ``retry_interval_s`` until
``timeout_s``; a soft reboot is a clean shutdown waited for, then a new boot, and reports
failure when the guest did not go down in time so the caller reboots hard. Whether a
guest rebooted is only visible in the guest, so novaq never reports a reboot from
``virDomainReboot`` alone.

Owns the waiting only; the caller (``driver``) decides what follows. Refuses to talk to
libvirt other than through ``Guest``. Polls every ``POLL_S`` (Nova: every second); the
test driver shuts a guest off at once, so the first poll sees it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from novaq.exceptions import HypervisorError
from virt import power_state
from virt.libvirt.guest import Guest

LOG = logging.getLogger(__name__)

POLL_S: Final = 0.5

Sleep = Callable[[float], None]


def _is_down(guest: Guest) -> bool:
    return guest.get_power_state() in power_state.OFF


def clean_shutdown(
    guest: Guest, timeout_s: float, retry_interval_s: float, sleep: Sleep = time.sleep
) -> bool:
    """Nova's ``_clean_shutdown``: ACPI shutdown, repeated every ``retry_interval_s``,
    until the guest is off or ``timeout_s`` passed. True when it went down by itself."""
    if _is_down(guest) or not guest.is_active():
        return True
    _ask_shutdown(guest)
    deadline = time.monotonic() + timeout_s
    next_ask = time.monotonic() + retry_interval_s
    while True:
        if _is_down(guest) or not guest.is_active():
            LOG.info("guest %s shut down cleanly", guest.uuid)
            return True
        now = time.monotonic()
        if now >= deadline:
            LOG.warning("guest %s did not shut down within %s s", guest.uuid, timeout_s)
            return False
        if now >= next_ask:
            _ask_shutdown(guest)
            next_ask = now + retry_interval_s
        sleep(min(POLL_S, deadline - now))


def _ask_shutdown(guest: Guest) -> None:
    try:
        guest.shutdown()
    except HypervisorError as exc:
        # NOTE: as Nova's: the guest may be going down already; the state decides.
        LOG.info("shutdown request to guest %s failed: %s", guest.uuid, exc)


def soft_reboot(
    guest: Guest, wait_s: float, lookup: Callable[[], Guest], sleep: Sleep = time.sleep
) -> bool:
    """Nova's ``_soft_reboot``: a running guest is asked to shut down, waited for up to
    ``wait_s`` and started again (a new boot). True when that happened, or when the
    guest came back by itself under a new domain id; False (reboot hard) when the guest
    was not running, or did not go down in time.

    NOTE: ``lookup`` gives a fresh ``Guest`` each poll, as Nova looks the domain up
    again: libvirt-python caches a ``virDomain``'s id, so the object we hold would keep
    reporting the old id after the guest went down."""
    if guest.get_power_state() != power_state.RUNNING:
        return False
    old_id = guest.domain_id
    guest.shutdown()
    deadline = time.monotonic() + wait_s
    while True:
        guest = lookup()
        if guest.domain_id != old_id:
            if _is_down(guest) or not guest.is_active():
                LOG.info("guest %s shut down for a soft reboot; starting it", guest.uuid)
                guest.launch()
            else:
                LOG.info("guest %s rebooted by itself during a soft reboot", guest.uuid)
            return True
        now = time.monotonic()
        if now >= deadline:
            return False
        sleep(min(POLL_S, deadline - now))
