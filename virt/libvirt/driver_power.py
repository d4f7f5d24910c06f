"""The power operations of ``LibvirtDriver`` (Nova's ``power_off``, ``power_on``,
``pause``, ``unpause``, ``suspend``, ``resume``, ``trigger_crash_dump``): each a no-op in
its target state and refused in a state it cannot leave, mixed into the driver as its
disk operations are."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from novaq.exceptions import HypervisorError
from virt import power_state
from virt.libvirt.guest import Guest
from virt.libvirt.options import GuestOptions
from virt.libvirt.power import clean_shutdown

LOG = logging.getLogger(__name__)


class PowerOperations:
    """Mixed into ``LibvirtDriver``, whose connection and options it uses."""

    options: GuestOptions

    if TYPE_CHECKING:

        def _get(self, uuid: str) -> Guest: ...

    def power_off(self, uuid: str, timeout_s: float = 0) -> None:
        """Nova's ``power_off``: with ``timeout_s`` > 0 a clean shutdown first (ACPI,
        asked again every ``shutdown_retry_interval_s``), then destroy whatever is left.
        Only a running guest is asked: a paused or crashed one cannot answer ACPI."""
        guest = self._get(uuid)
        if timeout_s > 0 and guest.get_power_state() == power_state.RUNNING:
            clean_shutdown(guest, timeout_s, self.options.shutdown_retry_interval_s)
        guest.poweroff_if_active()

    def power_on(self, uuid: str) -> None:
        guest = self._get(uuid)
        state = guest.get_power_state()
        if state == power_state.PAUSED:
            guest.resume()
        elif state != power_state.RUNNING:
            guest.poweroff_if_active()  # crashed but kept by on_crash=preserve
            guest.launch()

    def pause(self, uuid: str) -> None:
        guest = self._get(uuid)
        state = guest.get_power_state()
        if state == power_state.RUNNING:
            guest.pause()
        elif state != power_state.PAUSED:
            raise _refuse("pause", uuid, state)

    def unpause(self, uuid: str) -> None:
        guest = self._get(uuid)
        state = guest.get_power_state()
        if state == power_state.PAUSED:
            guest.resume()
        elif state != power_state.RUNNING:
            raise _refuse("unpause", uuid, state)

    def trigger_crash_dump(self, uuid: str) -> None:
        self._get(uuid).inject_nmi()

    def suspend(self, uuid: str) -> None:
        """Managed save: memory to disk, guest off (power state SHUTDOWN, as in Nova)."""
        guest = self._get(uuid)
        if _is_suspended(guest):
            return
        state = guest.get_power_state()
        if state not in (power_state.RUNNING, power_state.PAUSED):
            raise _refuse("suspend", uuid, state)
        guest.save_memory_state()

    def resume(self, uuid: str) -> None:
        guest = self._get(uuid)
        if _is_suspended(guest):
            guest.launch()
            return
        state = guest.get_power_state()
        if state != power_state.RUNNING:
            raise _refuse("resume", uuid, state)


def _is_suspended(guest: Guest) -> bool:
    return not guest.is_active() and guest.has_saved_memory_state()


def _refuse(action: str, uuid: str, state: int) -> HypervisorError:
    name = power_state.NAMES.get(state, str(state))
    return HypervisorError(reason=f"cannot {action} guest {uuid} while it is {name}")
