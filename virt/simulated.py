"""A simulated compute host whose guests outlive the worker process.

libvirt's test driver keeps guests in the memory of the process that opened
``test:///<file>``, so a SIGKILLed ``celery worker`` would take its guests with
it, unlike a real host where they keep running in qemu while nova-compute
restarts. ``SimulatedHostDriver`` wraps a ``LibvirtDriver`` and, after every
mutating call, persists that guest (domain XML, Nova power state, managed save)
to ``<state_dir>/domains/<uuid>.json``. A new driver on the same ``state_dir``
writes ``<state_dir>/node.xml`` with those guests embedded (``domain_for_restart``)
and opens it, so they come back running, paused, shut off or suspended.

Also owns the ``spawn_failure_rate`` chaos knob of ``HostProfile``.

Refuses to share a ``state_dir`` between processes (one worker owns one host, as
one nova-compute owns one hypervisor) and to persist anything it did not do
itself: the JSON files are written only by the operations below.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid as uuid_module
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar

from novaq.exceptions import DomainNotFound, HypervisorError, InvalidInput
from virt.atomic_write import write_atomically
from virt.driver import (
    GuestInfo,
    GuestSpec,
    GuestUsage,
    HostCpuStats,
    HostResources,
    ImageCacheReport,
    ImageSpec,
)
from virt.event import LifecycleEvent
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.guest import Guest
from virt.libvirt.imagebackend import DiskOptions
from virt.libvirt.imagecache import DEFAULT_SUBDIRECTORY
from virt.libvirt.options import GuestOptions
from virt.node_xml import build_node_xml, domain_for_restart, test_uri

LOG = logging.getLogger(__name__)

CHAOS_SPAWN_FAILURE: Final = "simulated spawn failure (chaos)"
DOMAINS_DIR: Final = "domains"
INSTANCES_DIR: Final = "instances"
NODE_XML: Final = "node.xml"

T = TypeVar("T")


def canonical_uuid(value: str) -> str | None:
    """``value`` as libvirt prints UUIDs (lower case, dashed), or None if it is not one."""
    try:
        return str(uuid_module.UUID(value))
    except (TypeError, ValueError, AttributeError):
        return None


def guest_record(info: GuestInfo, managed_save: bool) -> dict[str, Any]:
    """The JSON document persisted for one guest."""
    return {
        "uuid": info.uuid,
        "xml": info.xml,
        "power_state": info.power_state,
        "managed_save": managed_save,
    }


def restart_xml(record: dict[str, Any]) -> str:
    """The domain XML of a persisted guest, marked to come back in its old state."""
    xml, state, saved = record["xml"], record["power_state"], record["managed_save"]
    if not isinstance(xml, str) or not isinstance(state, int) or not isinstance(saved, bool):
        raise InvalidInput(reason="guest record needs xml (str), power_state (int), managed_save")
    return domain_for_restart(xml, state, managed_save=saved)


def load_restart_domains(domains_dir: Path) -> list[str]:
    """Restart XML of every guest persisted in ``domains_dir``; unreadable files are skipped."""
    domains = []
    for path in sorted(domains_dir.glob("*.json")):
        try:
            domains.append(restart_xml(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError, InvalidInput) as exc:
            # NOTE: one bad record must not keep the host (and its other guests) down;
            # compute's audit will see this guest missing, as on a real host.
            LOG.warning("simulated host: skipping unreadable guest record %s: %s", path, exc)
    return domains


class _GuestLock:
    """One guest's lock and how many threads hold or wait for it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class SimulatedHostDriver:
    """A ``ComputeDriver`` for one simulated host whose guests survive a worker restart."""

    def __init__(
        self,
        profile: HostProfile,
        state_dir: Path,
        *,
        instances_path: Path | None = None,
        image_cache_subdirectory: str = DEFAULT_SUBDIRECTORY,
        rng: random.Random | None = None,
        options: GuestOptions | None = None,
        disk_options: DiskOptions | None = None,
    ) -> None:
        self.profile = profile
        self.state_dir = Path(state_dir)
        self._domains_dir = self.state_dir / DOMAINS_DIR
        self._domains_dir.mkdir(parents=True, exist_ok=True)
        self._rng = rng if rng is not None else random.Random()
        self._locks: dict[str, _GuestLock] = {}
        self._locks_lock = threading.Lock()
        self.uri = test_uri(self._write_node_xml())
        self._driver = LibvirtDriver(
            self.uri,
            fail_spawn=profile.fail_spawn,
            # NOTE: a simulated host keeps its instance files with its other state unless
            # told otherwise, never in the system-wide default path.
            instances_path=instances_path or self.state_dir / INSTANCES_DIR,
            nodename=profile.name,
            image_cache_subdirectory=image_cache_subdirectory,
            options=options,
            disk_options=disk_options,
        )

    def _write_node_xml(self) -> Path:
        domains = load_restart_domains(self._domains_dir)
        path = self.state_dir / NODE_XML
        write_atomically(path, build_node_xml(self.profile, domains))
        LOG.info("host %s: restored %d simulated guests", self.profile.name, len(domains))
        return path

    @property
    def libvirt_driver(self) -> LibvirtDriver:
        """The wrapped driver (for tests and diagnostics)."""
        return self._driver

    @property
    def fail_spawn(self) -> bool:
        return self.profile.fail_spawn

    @property
    def instances_path(self) -> Path:
        return self._driver.instances_path

    # -- reads --------------------------------------------------------------

    def init_host(self, host: str) -> None:
        self._driver.init_host(host)

    def get_available_resource(self) -> HostResources:
        return self._driver.get_available_resource()

    def get_available_nodes(self) -> list[str]:
        return self._driver.get_available_nodes()

    def get_host_cpu_stats(self) -> HostCpuStats:
        return self._driver.get_host_cpu_stats()

    def list_instance_uuids(self) -> list[str]:
        return self._driver.list_instance_uuids()

    def instance_exists(self, uuid: str) -> bool:
        return self._driver.instance_exists(uuid)

    def list_guest_usage(self) -> list[GuestUsage]:
        return self._driver.list_guest_usage()

    def owns_guest(self, uuid: str) -> bool:
        return self._driver.owns_guest(uuid)

    def get_info(self, uuid: str) -> GuestInfo:
        return self._driver.get_info(uuid)

    def block_stats(self, uuid: str) -> dict[str, dict[str, int]]:
        return self._driver.block_stats(uuid)

    def guest_devices(self, uuid: str) -> dict[str, Any]:
        return self._driver.guest_devices(uuid)

    def get_console_output(self, uuid: str, length: int | None = None) -> str:
        return self._driver.get_console_output(uuid, length)

    def instance_files_exist(self, uuid: str) -> bool:
        return self._driver.instance_files_exist(uuid)

    def delete_instance_files(self, uuid: str) -> bool:
        with self._lock_for(uuid):  # not while a spawn of the same guest writes them
            return self._driver.delete_instance_files(uuid)

    def manage_image_cache(
        self,
        images_in_use: Collection[str],
        *,
        remove_unused: bool,
        min_age_s: int,
        known_images: Collection[str] = (),
    ) -> ImageCacheReport:
        return self._driver.manage_image_cache(
            images_in_use,
            remove_unused=remove_unused,
            min_age_s=min_age_s,
            known_images=known_images,
        )

    def register_event_listener(
        self, listener: Callable[[LifecycleEvent], None] | None, delay_s: float = 15.0
    ) -> None:
        self._driver.register_event_listener(listener, delay_s)

    def close(self) -> None:
        self._driver.close()

    # -- mutations ----------------------------------------------------------

    def spawn(self, spec: GuestSpec) -> GuestInfo:
        """Define and start ``spec``; may fail by chaos (``profile.spawn_failure_rate``)."""
        with self._lock_for(spec.uuid):
            info: GuestInfo | None = None
            try:
                # NOTE: a guest that exists is never failed by chaos: spawn must stay
                # idempotent for a redelivered build (see ``virt.driver``).
                # NOTE: no chaos configured, no lookup (issue 16: the driver's spawn
                # looks the guest up again).
                if (
                    self.profile.spawn_failure_rate
                    and not self._driver.instance_exists(spec.uuid)
                    and self._chaos_strikes()
                ):
                    LOG.warning("host %s: chaos refuses guest %s", self.profile.name, spec.uuid)
                    raise HypervisorError(reason=CHAOS_SPAWN_FAILURE)
                self._delay_start(spec.uuid)
                info = self._driver.spawn(spec)
                return info
            finally:
                # As ``_persisting``, from the view spawn just read (issue 16: not read twice).
                # NOTE: a guest spawn brought up runs, so it has no managed save (starting
                # a saved guest consumes its save): not asked of libvirt again.
                self._persist(spec.uuid, info, managed_save=False if info is not None else None)

    def _delay_start(self, uuid: str) -> None:
        """``profile.spawn_delay_s``: a guest that is not defined yet takes that long to
        come up, whichever step starts it (a build, or a move's finish or revert)."""
        if self.profile.spawn_delay_s and not self._driver.instance_exists(uuid):
            time.sleep(self.profile.spawn_delay_s)

    def _chaos_strikes(self) -> bool:
        return self._rng.random() < self.profile.spawn_failure_rate

    def destroy(self, uuid: str) -> None:
        # NOTE: the record goes first: a worker killed between the two steps then loses a
        # guest that was going anyway, instead of bringing a destroyed guest back to life.
        # A destroy that returned left no guest, so nothing is persisted after it (issue
        # 16: the lookup that found it gone, its DomainNotFound and a second unlink were
        # a tenth of the act); one that raised may have left one (stopped, not undefined),
        # persisted as it is then.
        with self._lock_for(uuid):
            canonical = canonical_uuid(uuid)
            if canonical is not None:
                self.record_path(canonical).unlink(missing_ok=True)
            try:
                self._driver.destroy(uuid)
            except BaseException:
                self._persist(uuid)
                raise

    def power_off(self, uuid: str, timeout_s: float = 0) -> None:
        with self._persisting(uuid):
            self._driver.power_off(uuid, timeout_s)

    def power_on(self, uuid: str) -> None:
        self._mutate(uuid, self._driver.power_on)

    def reboot(self, spec: GuestSpec, hard: bool) -> None:
        with self._persisting(spec.uuid):
            self._driver.reboot(spec, hard)

    def pause(self, uuid: str) -> None:
        self._mutate(uuid, self._driver.pause)

    def unpause(self, uuid: str) -> None:
        self._mutate(uuid, self._driver.unpause)

    def trigger_crash_dump(self, uuid: str) -> None:
        self._driver.trigger_crash_dump(uuid)  # nothing to persist: the guest's state stays

    def suspend(self, uuid: str) -> None:
        self._mutate(uuid, self._driver.suspend)

    def resume(self, uuid: str) -> None:
        self._mutate(uuid, self._driver.resume)

    # -- moves and rescue (the same libvirt driver code, persisted) ----------------

    def migrate_disk_and_power_off(
        self, spec: GuestSpec, new_spec: GuestSpec, dest_instances_path: str | None
    ) -> None:
        with self._persisting(spec.uuid):
            self._driver.migrate_disk_and_power_off(spec, new_spec, dest_instances_path)

    def finish_migration(
        self, spec: GuestSpec, power_on: bool, disks_from: str | None = None
    ) -> GuestInfo:
        with self._persisting(spec.uuid):
            self._delay_start(spec.uuid)
            return self._driver.finish_migration(spec, power_on, disks_from)

    def confirm_migration(self, uuid: str) -> None:
        with self._lock_for(uuid):
            self._driver.confirm_migration(uuid)

    def finish_revert_migration(self, spec: GuestSpec, power_on: bool) -> GuestInfo:
        with self._persisting(spec.uuid):
            self._delay_start(spec.uuid)
            return self._driver.finish_revert_migration(spec, power_on)

    def rescue(self, spec: GuestSpec, rescue_image: ImageSpec | None) -> GuestInfo:
        with self._persisting(spec.uuid):
            return self._driver.rescue(spec, rescue_image)

    def unrescue(self, uuid: str) -> GuestInfo:
        return self._mutate(uuid, self._driver.unrescue)

    # -- persistence --------------------------------------------------------

    def _mutate(self, uuid: str, operation: Callable[[str], T]) -> T:
        with self._persisting(uuid):
            return operation(uuid)

    @contextmanager
    def _persisting(self, uuid: str) -> Iterator[None]:
        """Run one operation on ``uuid`` under its lock, then persist what the guest is now.

        NOTE: the guest is persisted even when the operation raised, because a failed
        operation can still have changed it (a hard reboot that stopped but did not
        start the guest); a guest that is gone loses its file.
        """
        with self._lock_for(uuid):
            try:
                yield
            finally:
                self._persist(uuid)

    @contextmanager
    def _lock_for(self, uuid: str) -> Iterator[None]:
        """Hold guest ``uuid``'s lock. A lock lives while someone holds or waits for it,
        so a host that runs thousands of guests over its life keeps none of the gone ones."""
        with self._locks_lock:
            lock = self._locks.get(uuid)
            if lock is None:
                lock = self._locks[uuid] = _GuestLock()
            lock.users += 1
        try:
            with lock.lock:
                yield
        finally:
            with self._locks_lock:
                lock.users -= 1
                if not lock.users:
                    del self._locks[uuid]

    def _persist(
        self, uuid: str, info: GuestInfo | None = None, managed_save: bool | None = None
    ) -> None:
        """Write what guest ``uuid`` is now (``info``: its view just read, under its lock;
        ``managed_save``: whether it has one, when the caller knows)."""
        canonical = canonical_uuid(uuid)
        if canonical is None:
            return  # no guest can have it, and it must not become a file name
        try:
            if info is None:
                info = self._driver.get_info(canonical)
            if managed_save is None:
                managed_save = self._has_managed_save(canonical)
        except DomainNotFound:
            self.record_path(canonical).unlink(missing_ok=True)
            return
        record = json.dumps(guest_record(info, managed_save), indent=2)
        write_atomically(self.record_path(canonical), record)

    def _has_managed_save(self, uuid: str) -> bool:
        return Guest(self._driver.host.lookup_domain(uuid)).has_saved_memory_state()

    def record_path(self, uuid: str) -> Path:
        """Where the guest ``uuid`` is persisted: ``<state_dir>/domains/<uuid>.json``."""
        return self._domains_dir / f"{uuid}.json"
