"""An in-memory ``ComputeDriver`` for unit tests of compute logic, and its failure twins.

Owns a dictionary of guests with the same semantics as ``LibvirtDriver``
(idempotent spawn and destroy, power operations that are no-ops in the target
state and refused in a forbidden one, suspend = saved memory + SHUTDOWN), so
compute tests can run without libvirt. ``tests/unit/virt`` runs the same checks
on both drivers. Instance files and the base image cache are a set and a dict
with the libvirt driver's rules. Refuses to pretend more: no XML beyond a minimal domain
document, no capacity checks (claims are compute's job).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lxml import etree

from novaq.exceptions import DomainNotFound, HypervisorError, InstanceNotRunning
from virt import power_state
from virt.console_log import check_length, tail_lines
from virt.cpu_clock import SimulatedCpuClock
from virt.driver import (
    GuestInfo,
    GuestSpec,
    GuestUsage,
    HostCpuStats,
    HostResources,
    ImageCacheReport,
    ImageSpec,
    check_can_resize,
)
from virt.event import LifecycleEvent


@dataclass(frozen=True, slots=True)
class FakeGuest:
    spec: GuestSpec
    power_state: int
    saved: bool = False  # suspended: memory saved, guest off
    rescue_image: ImageSpec | None = None  # rescued: booted from this image
    rescued: bool = False


_ZERO_COUNTERS = {"rd_req": 0, "rd_bytes": 0, "wr_req": 0, "wr_bytes": 0}


def _disks(spec: GuestSpec) -> list[tuple[str, str]]:
    """(target dev, file name) of the guest's disks, named as the libvirt designer names them."""
    names = ["disk"]
    if spec.ephemeral_gb:
        names.append("disk.eph0")
    if spec.swap_mb:
        names.append("disk.swap")
    return [("vd" + chr(ord("a") + index), name) for index, name in enumerate(names)]


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
        #: Guests whose instance directory exists, and the image cache: image ref -> when
        #: it was last fetched or used (epoch seconds; a test ages an image by lowering it).
        self.instance_files: set[str] = set()
        self.cached_images: dict[str, float] = {}
        #: Guests whose files a move keeps aside (``<uuid>_resize``) until confirm/revert.
        self.resize_files: set[str] = set()
        #: Never written: fake disks are the sets above, this only names the host's.
        self.instances_path = Path("/nonexistent/fake-instances") / resources.hypervisor_hostname
        #: I/O counters a test sets per guest and disk target; unset ones read 0.
        self.block_counters: dict[str, dict[str, dict[str, int]]] = {}
        #: What each guest "printed" on its console (a test writes it), the
        #: ``power_off`` timeouts and the reboots (uuid, hard) asked for.
        self.console_logs: dict[str, str] = {}
        self.power_off_timeouts: list[tuple[str, float]] = []
        self.reboots: list[tuple[str, bool]] = []
        #: Guests sent an NMI (``trigger_crash_dump``), in order.
        self.nmis: list[str] = []
        self.event_listener: Callable[[LifecycleEvent], None] | None = None
        #: CPU counters as a simulated libvirt host's (``virt.cpu_clock``); a test may
        #: replace the clock, or set ``cpu_stats`` to answer fixed figures.
        self.cpu_clock = SimulatedCpuClock()
        self.cpu_mhz = 2400
        self.cpu_stats: HostCpuStats | None = None

    def init_host(self, host: str) -> None:
        self.host = host

    def get_available_resource(self) -> HostResources:
        return self.resources

    def get_available_nodes(self) -> list[str]:
        return [self.resources.hypervisor_hostname]

    def get_host_cpu_stats(self) -> HostCpuStats:
        if self.cpu_stats is not None:
            return self.cpu_stats
        with self._lock:
            busy = sum(
                g.spec.vcpus for g in self._guests.values() if g.power_state == power_state.RUNNING
            )
        user, idle = self.cpu_clock.read(self.resources.vcpus, busy)
        return HostCpuStats(user, 0, idle, 0, self.cpu_mhz)

    def list_instance_uuids(self) -> list[str]:
        with self._lock:
            return sorted(self._guests)

    def instance_exists(self, uuid: str) -> bool:
        with self._lock:
            return uuid in self._guests

    def list_guest_usage(self) -> list[GuestUsage]:
        """Through ``get_info``, so a test's twin that changes what it answers changes this."""
        usage = []
        for uuid in self.list_instance_uuids():
            try:
                info = self.get_info(uuid)
            except DomainNotFound:  # destroyed between the listing and the read
                continue
            usage.append(GuestUsage(uuid, info.vcpus, info.memory_mb))
        return usage

    def owns_guest(self, uuid: str) -> bool:
        return self.instance_exists(uuid)

    def spawn(self, spec: GuestSpec) -> GuestInfo:
        with self._lock:
            guest = self._guests.get(spec.uuid)
            if guest is None:
                self.spawn_count += 1
                guest = FakeGuest(spec, power_state.RUNNING)
                self.instance_files.add(spec.uuid)
                if spec.image_id:
                    self.cached_images[spec.image_id] = time.time()
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

    def block_stats(self, uuid: str) -> dict[str, dict[str, int]]:
        with self._lock:
            guest = self._get(uuid)
            if guest.power_state not in (power_state.RUNNING, power_state.PAUSED):
                return {}
            counters = self.block_counters.get(uuid, {})
            return {
                dev: {**_ZERO_COUNTERS, **counters.get(dev, {})} for dev, _ in _disks(guest.spec)
            }

    def guest_devices(self, uuid: str) -> dict[str, Any]:
        with self._lock:
            spec = self._get(uuid).spec
        return {
            "disks": [
                {"target_dev": dev, "source_path": f"{uuid}/{name}", "bus": "virtio"}
                for dev, name in _disks(spec)
            ],
            "pci_devices": list(spec.pci_addresses),
            "consoles": [{"type": "pty", "target_type": "serial", "port": 0}],
        }

    def power_off(self, uuid: str, timeout_s: float = 0) -> None:
        """Off at once whatever ``timeout_s`` (a fake guest always answers ACPI);
        ``power_off_timeouts`` records the timeouts asked for."""
        self.power_off_timeouts.append((uuid, timeout_s))
        self._set(uuid, power_state.SHUTDOWN, allowed=None, keep_saved=True)

    def power_on(self, uuid: str) -> None:
        self._set(uuid, power_state.RUNNING, allowed=None)

    def reboot(self, spec: GuestSpec, hard: bool) -> None:
        """Running again; a hard reboot takes ``spec`` (as a redefined domain would)."""
        with self._lock:
            guest = self._get(spec.uuid)
            self._guests[spec.uuid] = replace(
                guest,
                spec=spec if hard else guest.spec,
                power_state=power_state.RUNNING,
                saved=False,
            )
            self.reboots.append((spec.uuid, hard))

    def get_console_output(self, uuid: str, length: int | None = None) -> str:
        with self._lock:
            self._get(uuid)
            return tail_lines(self.console_logs.get(uuid, ""), check_length(length))

    def pause(self, uuid: str) -> None:
        self._set(uuid, power_state.PAUSED, allowed=(power_state.RUNNING,))

    def unpause(self, uuid: str) -> None:
        self._set(uuid, power_state.RUNNING, allowed=(power_state.PAUSED,))

    def trigger_crash_dump(self, uuid: str) -> None:
        with self._lock:
            guest = self._get(uuid)
            if guest.power_state not in (power_state.RUNNING, power_state.PAUSED):
                raise InstanceNotRunning(instance_id=uuid)
            self.nmis.append(uuid)

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

    def instance_files_exist(self, uuid: str) -> bool:
        with self._lock:
            return uuid in self.instance_files or uuid in self.resize_files

    def delete_instance_files(self, uuid: str) -> bool:
        with self._lock:
            self.instance_files.discard(uuid)
            self.resize_files.discard(uuid)
            return True

    # -- moves and rescue, with the libvirt driver's rules ----------------------------

    def migrate_disk_and_power_off(
        self, spec: GuestSpec, new_spec: GuestSpec, dest_instances_path: str | None
    ) -> None:
        check_can_resize(spec, new_spec)
        self.destroy(spec.uuid)
        with self._lock:
            if spec.uuid in self.instance_files:
                self.instance_files.discard(spec.uuid)
                self.resize_files.add(spec.uuid)

    def finish_migration(
        self, spec: GuestSpec, power_on: bool, disks_from: str | None = None
    ) -> GuestInfo:
        return self._define_and_settle(spec, power_on)

    def confirm_migration(self, uuid: str) -> None:
        with self._lock:
            self.resize_files.discard(uuid)

    def finish_revert_migration(self, spec: GuestSpec, power_on: bool) -> GuestInfo:
        with self._lock:
            if spec.uuid in self.resize_files:
                self.resize_files.discard(spec.uuid)
                self.instance_files.add(spec.uuid)
        return self._define_and_settle(spec, power_on)

    def _define_and_settle(self, spec: GuestSpec, power_on: bool) -> GuestInfo:
        with self._lock:
            guest = self._guests.get(spec.uuid)
            if guest is None:
                self.spawn_count += 1
                guest = FakeGuest(spec, power_state.SHUTDOWN)
                self.instance_files.add(spec.uuid)
            if power_on and guest.power_state not in (power_state.RUNNING, power_state.PAUSED):
                guest = replace(guest, power_state=power_state.RUNNING, saved=False)
            self._guests[spec.uuid] = guest
            return self._info(guest)

    def rescue(self, spec: GuestSpec, rescue_image: ImageSpec | None) -> GuestInfo:
        with self._lock:
            guest = replace(
                self._get(spec.uuid),
                power_state=power_state.RUNNING,
                saved=False,
                rescued=True,
                rescue_image=rescue_image,
            )
            self._guests[spec.uuid] = guest
            return self._info(guest)

    def unrescue(self, uuid: str) -> GuestInfo:
        with self._lock:
            guest = self._get(uuid)
            guest = replace(
                guest, power_state=power_state.RUNNING, rescued=False, rescue_image=None
            )
            self._guests[uuid] = guest
            return self._info(guest)

    def is_rescued(self, uuid: str) -> bool:
        """Whether the guest boots a rescue image (for tests)."""
        with self._lock:
            return self._get(uuid).rescued

    def manage_image_cache(
        self,
        images_in_use: Collection[str],
        *,
        remove_unused: bool,
        min_age_s: int,
        known_images: Collection[str] = (),
    ) -> ImageCacheReport:
        """The libvirt driver's rules (``virt.libvirt.imagecache``) on ``cached_images``."""
        now, used = time.time(), set(images_in_use) - {""}
        with self._lock:
            in_use = sorted(used & self.cached_images.keys())
            self.cached_images.update(dict.fromkeys(in_use, now))
            unused = sorted(self.cached_images.keys() - used)
            old = {r for r in unused if now - self.cached_images[r] >= min_age_s}
            removed = [r for r in unused if remove_unused and r in old]
            for image in removed:
                del self.cached_images[image]
        return ImageCacheReport(
            in_use=tuple(in_use),
            missing=tuple(sorted(used - set(in_use))),
            removed=tuple(removed),
            kept_unused=tuple(r for r in unused if r not in removed),
        )

    def register_event_listener(
        self, listener: Callable[[LifecycleEvent], None] | None, delay_s: float = 15.0
    ) -> None:
        """Kept for ``emit``: the fake hands events over at once, a test plays the delay."""
        self.event_listener = listener

    def emit(self, event: LifecycleEvent) -> None:
        """A lifecycle event from this fake hypervisor (a test calls it)."""
        if self.event_listener is not None:
            self.event_listener(event)

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


_ACTIONS: dict[int, str] = {power_state.PAUSED: "pause", power_state.RUNNING: "unpause"}


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
