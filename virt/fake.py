"""An in-memory ``ComputeDriver`` for unit tests of compute logic, and its failure twins.

Owns a dictionary of guests with the same semantics as ``LibvirtDriver``
(idempotent spawn and destroy, power operations that are no-ops in the target
state and refused in a forbidden one, suspend = saved memory + SHUTDOWN), so
compute tests can run without libvirt. ``tests/unit/virt`` runs the same checks
on both drivers. Refuses to pretend more: no XML beyond a minimal domain
document, no capacity checks (claims are compute's job).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

from lxml import etree

from novaq.exceptions import DomainNotFound, HypervisorError
from virt import power_state
from virt.driver import GuestInfo, GuestSpec, HostResources


@dataclass(frozen=True, slots=True)
class FakeGuest:
    spec: GuestSpec
    power_state: int
    saved: bool = False  # suspended: memory saved, guest off


def _fake_xml(spec: GuestSpec) -> str:
    domain = etree.Element("domain", type="fake")
    etree.SubElement(domain, "name").text = spec.name
    etree.SubElement(domain, "uuid").text = spec.uuid
    etree.SubElement(domain, "memory", unit="KiB").text = str(spec.memory_mb * 1024)
    etree.SubElement(domain, "vcpu").text = str(spec.vcpus)
    return etree.tostring(domain, encoding="unicode")


class FakeDriver:
    """A hypervisor in a dict. ``spawn_count``/``destroy_count`` count real (non no-op) calls."""

    def __init__(self, resources: HostResources) -> None:
        self.resources = resources
        self.host: str | None = None
        self.closed = False
        self.spawn_count = 0
        self.destroy_count = 0
        self._guests: dict[str, FakeGuest] = {}
        self._lock = threading.Lock()

    def init_host(self, host: str) -> None:
        self.host = host

    def get_available_resource(self) -> HostResources:
        return self.resources

    def get_available_nodes(self) -> list[str]:
        return [self.resources.hypervisor_hostname]

    def list_instance_uuids(self) -> list[str]:
        with self._lock:
            return sorted(self._guests)

    def instance_exists(self, uuid: str) -> bool:
        with self._lock:
            return uuid in self._guests

    def spawn(self, spec: GuestSpec) -> GuestInfo:
        with self._lock:
            guest = self._guests.get(spec.uuid)
            if guest is None:
                self.spawn_count += 1
                guest = FakeGuest(spec, power_state.RUNNING)
            elif guest.power_state not in (power_state.RUNNING, power_state.PAUSED):
                guest = replace(guest, power_state=power_state.RUNNING, saved=False)
            self._guests[spec.uuid] = guest
            return self._info(guest)

    def destroy(self, uuid: str) -> None:
        with self._lock:
            if self._guests.pop(uuid, None) is not None:
                self.destroy_count += 1

    def get_info(self, uuid: str) -> GuestInfo:
        with self._lock:
            return self._info(self._get(uuid))

    def power_off(self, uuid: str) -> None:
        self._set(uuid, power_state.SHUTDOWN, allowed=None, keep_saved=True)

    def power_on(self, uuid: str) -> None:
        self._set(uuid, power_state.RUNNING, allowed=None)

    def reboot(self, uuid: str, hard: bool) -> None:
        self._set(uuid, power_state.RUNNING, allowed=None)

    def pause(self, uuid: str) -> None:
        self._set(uuid, power_state.PAUSED, allowed=(power_state.RUNNING,))

    def unpause(self, uuid: str) -> None:
        self._set(uuid, power_state.RUNNING, allowed=(power_state.PAUSED,))

    def suspend(self, uuid: str) -> None:
        with self._lock:
            guest = self._get(uuid)
            if guest.saved:
                return
            _check(uuid, "suspend", guest.power_state, (power_state.RUNNING, power_state.PAUSED))
            self._guests[uuid] = replace(guest, power_state=power_state.SHUTDOWN, saved=True)

    def resume(self, uuid: str) -> None:
        with self._lock:
            guest = self._get(uuid)
            if guest.power_state == power_state.RUNNING:
                return
            if not guest.saved:
                _check(uuid, "resume", guest.power_state, ())
            self._guests[uuid] = replace(guest, power_state=power_state.RUNNING, saved=False)

    def close(self) -> None:
        self.closed = True

    # -- helpers ------------------------------------------------------------

    def _get(self, uuid: str) -> FakeGuest:
        try:
            return self._guests[uuid]
        except KeyError:
            raise DomainNotFound(name=uuid) from None

    def _set(
        self, uuid: str, target: int, allowed: tuple[int, ...] | None, keep_saved: bool = False
    ) -> None:
        """Move to ``target``; a no-op when there already, refused outside ``allowed``."""
        with self._lock:
            guest = self._get(uuid)
            if guest.power_state == target:
                return
            if allowed is not None:
                _check(uuid, _ACTIONS[target], guest.power_state, allowed)
            saved = guest.saved and keep_saved
            self._guests[uuid] = replace(guest, power_state=target, saved=saved)

    @staticmethod
    def _info(guest: FakeGuest) -> GuestInfo:
        spec = guest.spec
        return GuestInfo(
            uuid=spec.uuid,
            name=spec.name,
            power_state=guest.power_state,
            vcpus=spec.vcpus,
            memory_mb=spec.memory_mb,
            pci_addresses=spec.pci_addresses,
            xml=_fake_xml(spec),
        )


_ACTIONS = {power_state.PAUSED: "pause", power_state.RUNNING: "unpause"}


def _check(uuid: str, action: str, state: int, allowed: tuple[int, ...]) -> None:
    if state not in allowed:
        name = power_state.NAMES.get(state, str(state))
        raise HypervisorError(reason=f"cannot {action} guest {uuid} while it is {name}")


class SpawnFailingDriver(FakeDriver):
    """A host whose hypervisor refuses to start guests (as ``fail_spawn``)."""

    def spawn(self, spec: GuestSpec) -> GuestInfo:
        raise HypervisorError(reason="simulated host refuses to start guests")


class DestroyFailingDriver(FakeDriver):
    """A host whose hypervisor cannot destroy guests (they stay as they were)."""

    def destroy(self, uuid: str) -> None:
        raise HypervisorError(reason=f"simulated failure destroying guest {uuid}")
