"""``LibvirtDriver``: the ``ComputeDriver`` on any libvirt URI.

Owns the meaning of each compute operation on a libvirt domain: what is a
no-op (already in the target state), what is refused (``HypervisorError``),
what is cleaned up when a start fails, and where host resources are read from.
Nothing here is specific to the test driver: ``test:///<node.xml>`` and
``qemu:///system`` take the same path; the one difference is the domain type, which is
``[libvirt] virt_type`` (checked at ``init_host``) except on a ``test:`` URI, where it
is what the test driver offers (``virt.libvirt.options``).

Power as Nova's libvirt driver: ``power_off`` with a timeout is a clean shutdown
waited for, then destroy; a soft reboot is a shutdown waited for then a new boot,
falling back to hard; a hard reboot defines the domain again from fresh XML
(``virt.libvirt.power``). Guests belong to the compute host named at ``init_host``
(written in their metadata): ``list_instance_uuids`` lists only those, so hosts may
share one libvirtd. Lifecycle events go to a listener (``register_event_listener``,
``virt.libvirt.events``); the console log is read from the guest's serial log file.

What it keeps on disk is Nova's layout under ``instances_path``: a directory per guest
with its disks and ``disk.info`` (``virt.libvirt.instance_files``, made by
``virt.libvirt.imagebackend`` with ``qemu-img``) and the base files
(``virt.libvirt.imagecache``), written at spawn on every URI alike (the test driver
never opens the disks, but they exist as on a real host). ``destroy`` keeps the
directory (a move still needs it); ``delete_instance_files`` removes it. Moves and
rescue are ``virt.libvirt.driver_disks``. Refuses to create networks.

Where host resources come from: vCPUs and memory from ``virNodeGetInfo``; local
disk from the storage pool ``default`` (its capacity, or that of its
``novaq-local-disk`` volume, see ``virt.node_xml``), else from the file system
holding ``instances_path``; hypervisor type, version and hostname from the
connection; ``cpu_info`` from the capabilities, topology falling back to node
info; PCI devices from the PCI node devices.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from novaq.exceptions import DomainNotFound, HypervisorError
from virt import power_state
from virt.console_log import check_length, read_tail, tail_lines
from virt.cpu_clock import SimulatedCpuClock
from virt.driver import (
    GuestInfo,
    GuestSpec,
    GuestUsage,
    HostCpuStats,
    HostResources,
    ImageCacheReport,
    PciDevice,
)
from virt.libvirt.config_caps import LibvirtConfigCaps
from virt.libvirt.designer import (
    DEFAULT_INSTANCES_PATH,
    GuestPlatform,
    choose_platform,
    console_log_path,
    design_guest,
)
from virt.libvirt.driver_disks import DiskOperations
from virt.libvirt.driver_power import PowerOperations
from virt.libvirt.events import LIFECYCLE_DELAY_S, DomainEventSource, Listener
from virt.libvirt.guest import Guest, guest_devices, guest_info
from virt.libvirt.host import Host
from virt.libvirt.host_facts import cpu_info, filesystem_bytes, pci_device
from virt.libvirt.imagebackend import (
    EPHEMERAL,
    RESCUE,
    ROOT,
    SWAP,
    DiskOptions,
    ImageBackend,
)
from virt.libvirt.imagecache import DEFAULT_SUBDIRECTORY, ImageCache
from virt.libvirt.instance_files import InstanceFiles
from virt.libvirt.options import GuestOptions
from virt.libvirt.power import soft_reboot
from virt.libvirt.xml_templates import GuestXmlTemplates

LOG = logging.getLogger(__name__)

GIB = 1024**3
SIMULATED_SPAWN_FAILURE = "simulated host refuses to start guests"


class LibvirtDriver(DiskOperations, PowerOperations):
    """A ``ComputeDriver`` over one libvirt connection (``virt.get_driver`` shares it)."""

    def __init__(
        self,
        uri: str,
        fail_spawn: bool = False,
        instances_path: Path | None = None,
        nodename: str | None = None,
        image_cache_subdirectory: str = DEFAULT_SUBDIRECTORY,
        *,
        options: GuestOptions | None = None,
        disk_options: DiskOptions | None = None,
    ) -> None:
        self.uri = uri
        self.options = options or GuestOptions()
        self.fail_spawn = fail_spawn
        # NOTE: libvirt's test driver reports the real machine's hostname for every
        # simulated host, so a simulated host names its node itself.
        self.nodename = nodename
        self.instances_path = Path(instances_path or DEFAULT_INSTANCES_PATH)
        self._files = InstanceFiles(self.instances_path)
        self._image_cache = ImageCache(self.instances_path, image_cache_subdirectory)
        self.disk_options = disk_options or DiskOptions()
        self._backend = ImageBackend(self._image_cache, self.disk_options)
        self._host = Host(uri)
        self._host_name = uri
        #: The compute host owning this driver's guests (from ``init_host``), written in
        #: their metadata; None until then: guests of every owner are listed.
        self._owner: str | None = None
        self._platform: GuestPlatform | None = None
        self._platform_lock = threading.Lock()
        self._xml_templates = GuestXmlTemplates(self._design_xml)
        self._events: DomainEventSource | None = None
        #: A ``test:`` URI's CPU counters (the test driver's are constants).
        self._cpu_clock = SimulatedCpuClock() if uri.startswith("test:") else None

    @property
    def host(self) -> Host:
        """The connection this driver uses (for tests and diagnostics)."""
        return self._host

    # -- host ---------------------------------------------------------------

    def init_host(self, host: str) -> None:
        """Remember the compute host (logs, guest ownership), open the connection and
        check that libvirt offers ``[libvirt] virt_type`` (``ConfigError`` otherwise)."""
        self._host_name = self._owner = host
        self._host.get_connection()
        platform = self._guest_platform()
        LOG.info(
            "host %s: libvirt driver ready on %s (%s guests on %s)",
            host,
            self.uri,
            platform.virt_type,
            platform.arch,
        )

    def get_available_nodes(self) -> list[str]:
        return [self.nodename or self._host.get_hostname()]

    def get_available_resource(self) -> HostResources:
        node = self._host.get_node_info()
        caps = self._capabilities()
        return HostResources(
            hypervisor_hostname=self.nodename or self._host.get_hostname(),
            vcpus=node.cpus,
            memory_mb=node.memory_mb,
            local_gb=self._local_gb(),
            hypervisor_type=self._host.get_type(),
            hypervisor_version=self._host.get_version(),
            cpu_info=cpu_info(caps, node),
            pci_devices=self._pci_devices(),
        )

    def get_host_cpu_stats(self) -> HostCpuStats:
        """``virNodeGetCPUStats`` of all CPUs and ``virNodeGetInfo``'s frequency (Nova's
        ``get_host_cpu_stats``). On a ``test:`` URI the counters come from the simulated
        host's running guests (``virt.cpu_clock``: the test driver's are constants); the
        frequency is the node XML's. ``HypervisorError`` when a mode is not reported."""
        stats = self._host.get_cpu_stats()
        node = self._host.get_node_info()
        if self._cpu_clock is not None:
            user, idle = self._cpu_clock.read(node.cpus, self._host.running_vcpus())
            stats = {"user": user, "kernel": 0, "idle": idle, "iowait": 0}
        missing = [mode for mode in ("user", "kernel", "idle", "iowait") if mode not in stats]
        if missing:
            raise HypervisorError(
                reason=f"the host's CPU statistics lack {', '.join(missing)} time"
            )
        return HostCpuStats(
            stats["user"], stats["kernel"], stats["idle"], stats["iowait"], node.mhz
        )

    def _capabilities(self) -> LibvirtConfigCaps:
        return LibvirtConfigCaps.from_xml(self._host.get_capabilities_xml())

    def _local_gb(self) -> int:
        capacity = self._host.get_local_disk_bytes()
        if capacity is None:
            capacity = filesystem_bytes(self.instances_path)
        return capacity // GIB

    def _pci_devices(self) -> tuple[PciDevice, ...]:
        devices = [pci_device(xml) for xml in self._host.list_pci_device_xmls()]
        return tuple(sorted(devices, key=lambda device: device.address))

    def _guest_platform(self) -> GuestPlatform:
        with self._platform_lock:
            if self._platform is None:
                self._platform = choose_platform(self._capabilities(), self._virt_type())
            return self._platform

    def _virt_type(self) -> str | None:
        """``[libvirt] virt_type``, except on libvirt's test driver, which offers only
        its own ``test`` domains (None: take what the hypervisor offers)."""
        return None if self.uri.startswith("test:") else self.options.virt_type

    def register_event_listener(
        self, listener: Listener | None, delay_s: float = LIFECYCLE_DELAY_S
    ) -> None:
        """Hand this connection's guest lifecycle events to ``listener`` (Nova's
        ``register_event_listener``), STOPPED ones ``delay_s`` late; None stops them."""
        with self._platform_lock:
            events, self._events = self._events, None
        if events is not None:
            events.close()
        if listener is not None:
            source = DomainEventSource(self._host, listener, delay_s)
            with self._platform_lock:
                self._events = source

    def close(self) -> None:
        self.register_event_listener(None)
        self._host.close()

    # -- guests -------------------------------------------------------------

    def list_instance_uuids(self) -> list[str]:
        """This host's guests: domains with novaq metadata that names this compute host
        (or names none). A domain of another novaq host sharing the libvirtd, and any
        domain novaq did not define (no novaq metadata), are not ours and not listed."""
        guests = (Guest(domain) for domain in self._host.list_domains())
        return sorted(guest.uuid for guest in guests if self._owns(guest))

    def _owns(self, guest: Guest) -> bool:
        try:
            metadata = guest.get_config().metadata
        except (DomainNotFound, ValueError):
            return False  # gone meanwhile, or XML novaq cannot read: not one of ours
        if metadata is None:
            return False
        return self._owner is None or metadata.host in (None, self._owner)

    def instance_exists(self, uuid: str) -> bool:
        return self._find(uuid) is not None

    def list_guest_usage(self) -> list[GuestUsage]:
        """Every domain's vCPUs and memory from ``virDomainGetInfo``: ownership would take
        each domain's XML, hence ``owns_guest`` for the few whose owner matters."""
        return self._host.list_guest_usage()

    def owns_guest(self, uuid: str) -> bool:
        guest = self._find(uuid)
        return guest is not None and self._owns(guest)

    def get_info(self, uuid: str) -> GuestInfo:
        return guest_info(self._get(uuid))

    def block_stats(self, uuid: str) -> dict[str, dict[str, int]]:
        """Counters per disk target of a running guest (libvirt keeps none for a stopped one)."""
        guest = self._get(uuid)
        if not guest.is_active():
            return {}
        stats: dict[str, dict[str, int]] = {}
        for disk in guest.get_config().disks:
            try:
                stats[disk.target_dev] = guest.block_stats(disk.target_dev)
            except HypervisorError as exc:
                # As Nova's block_stats: the disk may have gone meanwhile; skip it.
                LOG.info(
                    "host %s: no block stats for %s of %s: %s",
                    self._host_name,
                    disk.target_dev,
                    uuid,
                    exc,
                )
        return stats

    def guest_devices(self, uuid: str) -> dict[str, Any]:
        return guest_devices(self._get(uuid).get_config())

    def get_console_output(self, uuid: str, length: int | None = None) -> str:
        """Nova's ``get_console_output``: the tail of the file the guest's serial port is
        logged to (its domain XML says where; ``console.log`` in its instance directory
        otherwise); "" while there is none yet (on the test driver no guest writes it)."""
        length = check_length(length)
        config = self._get(uuid).get_config()
        path = Path(config.serial_log_file or console_log_path(self.instances_path, uuid))
        return tail_lines(read_tail(path), length)

    def guest_xml(self, spec: GuestSpec) -> str:
        """The domain XML ``spawn`` defines for ``spec`` on this hypervisor (from the
        template of its shape, ``xml_templates``: the designer's XML, built once a shape)."""
        platform, owner = self._guest_platform(), self._owner
        return self._xml_templates.xml(spec, (platform, self.options, owner, self.instances_path))

    def _design_xml(self, spec: GuestSpec) -> str:
        config = design_guest(
            spec,
            self._guest_platform(),
            self.instances_path,
            options=self.options,
            host=self._owner,
        )
        return config.to_xml()

    def spawn(self, spec: GuestSpec) -> GuestInfo:
        """Define and start ``spec``; a guest of that uuid that exists is started, not redefined."""
        if self.fail_spawn:
            raise HypervisorError(reason=SIMULATED_SPAWN_FAILURE)
        guest = self._find(spec.uuid)
        if guest is None:
            guest = self._create_guest(spec)
        elif guest.get_power_state() not in (power_state.RUNNING, power_state.PAUSED):
            guest.launch()
        return guest_info(guest)

    def _create_guest(self, spec: GuestSpec) -> Guest:
        """Files first (base image, instance directory, disks), then define and start; a
        guest that cannot be created leaves no instance directory it made behind."""
        created = self._files.make_dir(spec.uuid)
        try:
            self._prepare_files(spec)
            guest = Guest(self._host.define_domain(self.guest_xml(spec)))
            self._start_new(guest)
        except Exception:
            if created:
                self._files.delete(spec.uuid)
            raise
        return guest

    def _prepare_files(self, spec: GuestSpec) -> None:
        """Nova's ``_create_image``: the base files in the cache (fetched or marked used),
        the disks missing from the instance directory, then ``disk.info``."""
        formats = self._backend.create_disks(spec, self._files.path(spec.uuid))
        self._files.write_disk_info(spec.uuid, formats)

    def _start_new(self, guest: Guest) -> None:
        """Start a guest just defined. NOTE: one log line for both (issue 16: a record
        costs ~0.2 ms in a worker); a guest that did not start says it was defined."""
        try:
            guest.launch()
        except HypervisorError:
            LOG.warning(
                "host %s: guest %s defined but did not start, undefining",
                self._host_name,
                guest.uuid,
            )
            guest.delete_configuration()
            raise
        LOG.info("host %s: defined and started guest %s", self._host_name, guest.uuid)

    def destroy(self, uuid: str) -> None:
        """Stop and undefine; a guest that is not there is already destroyed."""
        guest = self._find(uuid)
        if guest is None:
            return
        guest.poweroff_if_active()
        guest.delete_configuration()
        LOG.info("host %s: destroyed guest %s", self._host_name, uuid)

    # -- instance files and the image cache -----------------------------------

    def instance_files_exist(self, uuid: str) -> bool:
        return self._files.exist(uuid)

    def delete_instance_files(self, uuid: str) -> bool:
        return self._files.delete(uuid)

    def manage_image_cache(
        self,
        images_in_use: Collection[str],
        *,
        remove_unused: bool,
        min_age_s: int,
        known_images: Collection[str] = (),
    ) -> ImageCacheReport:
        return self._image_cache.update(
            images_in_use,
            self._files.backing_names((ROOT, EPHEMERAL, SWAP, RESCUE)),
            remove_unused=remove_unused,
            min_age_s=min_age_s,
            known_images=known_images,
        )

    # -- power ----------------------------------------------------------------

    def reboot(self, spec: GuestSpec, hard: bool) -> None:
        """Nova's ``reboot``: soft is a clean shutdown waited for up to
        ``wait_soft_reboot_seconds`` then a new boot, else (not running, or the guest did
        not go down in time) hard. Hard: destroy, define again from freshly designed XML
        (a lost domain is defined anew), boot."""
        guest = self._get(spec.uuid) if not hard else self._find(spec.uuid)
        if not hard and guest is not None:
            try:
                if soft_reboot(
                    guest,
                    self.options.wait_soft_reboot_seconds,
                    lambda: self._get(spec.uuid),
                ):
                    LOG.info("host %s: guest %s soft rebooted", self._host_name, spec.uuid)
                    return
                LOG.warning(
                    "host %s: failed to soft reboot %s, rebooting hard",
                    self._host_name,
                    spec.uuid,
                )
            except HypervisorError as exc:
                LOG.warning(
                    "host %s: soft reboot of %s failed (%s), rebooting hard",
                    self._host_name,
                    spec.uuid,
                    exc,
                )
        self._hard_reboot(spec, guest)

    def _hard_reboot(self, spec: GuestSpec, guest: Guest | None) -> None:
        """NOTE: the new XML is defined over the old definition (same uuid and name)
        rather than after an undefine, so a failure never leaves the guest undefined;
        libvirt refuses a new name over an old definition, so a guest of another name
        (defined by something else) is undefined first."""
        if guest is not None:
            guest.poweroff_if_active()
            if guest.has_saved_memory_state():
                guest.discard_saved_memory_state()
            if guest.name != spec.name:
                guest.delete_configuration()
        self._files.make_dir(spec.uuid)  # a lost guest may have lost its directory too
        self._prepare_files(spec)
        guest = Guest(self._host.define_domain(self.guest_xml(spec)))
        guest.launch()
        LOG.info("host %s: guest %s rebooted hard", self._host_name, spec.uuid)

    # -- helpers ------------------------------------------------------------

    def _find(self, uuid: str) -> Guest | None:
        try:
            return self._get(uuid)
        except DomainNotFound:
            return None

    def _get(self, uuid: str) -> Guest:
        return Guest(self._host.lookup_domain(uuid))
