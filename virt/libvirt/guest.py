"""A libvirt domain with intention-revealing methods (Nova's ``Guest``).

Owns the calls on one ``virDomain``: start, stop, pause, save, reboot, read
state and XML, forget the definition. Every libvirt call goes through
``host.translate_errors``, so callers only ever see ``novaq.exceptions``.
Also the views compute reads of a domain: ``guest_info`` and ``guest_devices``.
Refuses policy: whether an operation is allowed in a state, and what to do
when it is already done, is decided by ``virt.libvirt.driver``.
"""

from __future__ import annotations

import logging
from typing import Any

import libvirt

from novaq.exceptions import HypervisorError, InstanceNotRunning, TriggerCrashDumpNotSupported
from virt import power_state
from virt.driver import GuestInfo
from virt.libvirt.config import LibvirtConfigGuest, LibvirtConfigGuestConsole
from virt.libvirt.host import UNDEFINE_FLAGS, UNSUPPORTED_CODES, error_code, translate_errors

LOG = logging.getLogger(__name__)


class Guest:
    """One domain; cheap to build, holds no state of its own besides the ``virDomain``."""

    def __init__(self, domain: Any) -> None:
        self._domain = domain

    @property
    def uuid(self) -> str:
        return str(self._domain.UUIDString())

    @property
    def name(self) -> str:
        return str(self._domain.name())

    @property
    def domain_id(self) -> int:
        """The running domain's id (-1 while it is shut off); a new boot may change it."""
        return int(self._call("id read", "ID"))

    def _call(self, action: str, method: str, *args: int) -> Any:
        with translate_errors(f"{action} of guest {self.uuid}", self.uuid):
            return getattr(self._domain, method)(*args)

    def launch(self) -> None:
        """Start the defined domain (restoring its saved memory if it has some)."""
        self._call("start", "create")

    def poweroff(self) -> None:
        """Pull the plug: stop the domain at once (``virDomainDestroy``)."""
        self._call("power off", "destroy")

    def poweroff_if_active(self) -> None:
        """Nova's ``_destroy``: pull the plug if the domain runs. A guest that went down by
        itself between the check and the destroy (its clean shutdown finishing just then)
        is off, as wanted, not an error."""
        if not self.is_active():
            return
        try:
            self.poweroff()
        except HypervisorError as exc:
            if error_code(exc) != libvirt.VIR_ERR_OPERATION_INVALID or self.is_active():
                raise
            LOG.info("Guest %s went down by itself before it was destroyed", self.uuid)

    def shutdown(self) -> None:
        """Ask the guest OS to shut down (ACPI); returns before it has."""
        self._call("shutdown", "shutdown")

    def pause(self) -> None:
        """Freeze the vCPUs; memory stays in the host."""
        self._call("pause", "suspend")

    def resume(self) -> None:
        """Unfreeze the vCPUs of a paused guest."""
        self._call("resume", "resume")

    def inject_nmi(self) -> None:
        """A non-maskable interrupt (``virDomainInjectNMI``), as Nova's crash dump sends."""
        with translate_errors(f"NMI injection into guest {self.uuid}", self.uuid):
            try:
                self._domain.injectNMI()
            except libvirt.libvirtError as exc:
                code = exc.get_error_code()
                if code == libvirt.VIR_ERR_NO_SUPPORT:
                    raise TriggerCrashDumpNotSupported() from exc
                if code == libvirt.VIR_ERR_OPERATION_INVALID:
                    raise InstanceNotRunning(instance_id=self.uuid) from exc
                raise

    def save_memory_state(self) -> None:
        """Save memory to disk and stop (managed save); ``launch`` restores it."""
        self._call("managed save", "managedSave", 0)

    def discard_saved_memory_state(self) -> None:
        """Drop the managed save image: the next ``launch`` boots afresh."""
        self._call("managed save removal", "managedSaveRemove", 0)

    def has_saved_memory_state(self) -> bool:
        return bool(self._call("managed save check", "hasManagedSaveImage", 0))

    def is_active(self) -> bool:
        return bool(self._call("activity check", "isActive"))

    def get_power_state(self) -> int:
        """Nova's power state (``virt.power_state``) of the domain now."""
        state, _reason = self._call("state read", "state", 0)
        return power_state.from_libvirt(state)

    def get_resources(self) -> tuple[int, int]:
        """(vcpus, memory in MiB) of the domain."""
        _state, max_mem_kib, _mem_kib, vcpus, _cpu_time = self._call("info read", "info")
        return int(vcpus), int(max_mem_kib) // 1024

    def get_xml(self) -> str:
        return str(self._call("XML read", "XMLDesc", 0))

    def get_config(self) -> LibvirtConfigGuest:
        return LibvirtConfigGuest.from_xml(self.get_xml())

    def pci_addresses(self) -> tuple[str, ...]:
        """Addresses (``0000:08:00.0``) of the host PCI devices passed to the guest."""
        return LibvirtConfigGuest.pci_addresses_in(self.get_xml())

    def block_stats(self, disk: str) -> dict[str, int]:
        """I/O counters of one disk (target dev or source path) since the domain started;
        only a running domain has them (``virDomainBlockStats``)."""
        with translate_errors(f"block stats of {disk} of guest {self.uuid}", self.uuid):
            rd_req, rd_bytes, wr_req, wr_bytes, _errors = self._domain.blockStats(disk)
        return {"rd_req": rd_req, "rd_bytes": rd_bytes, "wr_req": wr_req, "wr_bytes": wr_bytes}

    def delete_configuration(self) -> None:
        """Undefine the domain with its managed save image and snapshot metadata."""
        try:
            self._call("undefine", "undefineFlags", UNDEFINE_FLAGS)
        except HypervisorError as exc:
            if error_code(exc) not in UNSUPPORTED_CODES:
                raise
            LOG.warning("guest %s: undefine flags unsupported, undefining plainly", self.uuid)
            self._call("undefine", "undefine")


def guest_info(guest: Guest) -> GuestInfo:
    """The live view of ``guest``."""
    xml = guest.get_xml()
    vcpus, memory_mb = guest.get_resources()
    return GuestInfo(
        uuid=guest.uuid,
        name=guest.name,
        power_state=guest.get_power_state(),
        vcpus=vcpus,
        memory_mb=memory_mb,
        pci_addresses=LibvirtConfigGuest.pci_addresses_in(xml),
        xml=xml,
    )


def guest_devices(config: LibvirtConfigGuest) -> dict[str, Any]:
    """The JSON view of what a domain is attached to (``ComputeDriver.guest_devices``)."""
    consoles = [d for d in config.devices if isinstance(d, LibvirtConfigGuestConsole)]
    return {
        "disks": [
            {"target_dev": d.target_dev, "source_path": d.source_path, "bus": d.target_bus}
            for d in config.disks
        ],
        "pci_devices": [hostdev.address for hostdev in config.hostdevs],
        "consoles": [
            {"type": c.type, "target_type": c.target_type, "port": c.target_port} for c in consoles
        ],
    }
