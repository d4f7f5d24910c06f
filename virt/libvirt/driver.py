"""``LibvirtDriver``: the ``ComputeDriver`` on any libvirt URI.

Owns the meaning of each compute operation on a libvirt domain: what is a
no-op (already in the target state), what is refused (``HypervisorError``),
what is cleaned up when a start fails, and where host resources are read from.
Nothing here is specific to the test driver: the domain type comes from the
capabilities, so ``test:///<node.xml>`` and ``qemu:///system`` take the same path.
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
import os
import threading
from collections.abc import Collection
from pathlib import Path
from typing import Any

from novaq.exceptions import DomainNotFound, HypervisorError
from virt import power_state
from virt.driver import GuestInfo, GuestSpec, HostResources, ImageCacheReport, PciDevice
from virt.libvirt.config import (
    LibvirtConfigCaps,
    LibvirtConfigGuest,
    LibvirtConfigGuestConsole,
    LibvirtConfigGuestDisk,
    LibvirtConfigNodeDevicePci,
)
from virt.libvirt.designer import (
    DEFAULT_INSTANCES_PATH,
    GuestPlatform,
    choose_platform,
    design_guest,
)
from virt.libvirt.driver_disks import DiskOperations
from virt.libvirt.guest import Guest
from virt.libvirt.host import Host, NodeInfo
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

LOG = logging.getLogger(__name__)

GIB = 1024**3
SIMULATED_SPAWN_FAILURE = "simulated host refuses to start guests"
_DEV_TYPES = {"virt_functions": "type-PF", "phys_function": "type-VF"}


class LibvirtDriver(DiskOperations):
    """A ``ComputeDriver`` over one libvirt connection (``virt.get_driver`` shares it)."""

    def __init__(
        self,
        uri: str,
        fail_spawn: bool = False,
        instances_path: Path | None = None,
        nodename: str | None = None,
        image_cache_subdirectory: str = DEFAULT_SUBDIRECTORY,
        disk_options: DiskOptions | None = None,
    ) -> None:
        self.uri = uri
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
        self._platform: GuestPlatform | None = None
        self._platform_lock = threading.Lock()

    @property
    def host(self) -> Host:
        """The connection this driver uses (for tests and diagnostics)."""
        return self._host

    # -- host ---------------------------------------------------------------

    def init_host(self, host: str) -> None:
        """Remember the compute host's name (for logs) and open the connection."""
        self._host_name = host
        self._host.get_connection()
        LOG.info("host %s: libvirt driver ready on %s", host, self.uri)

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
                self._platform = choose_platform(self._capabilities())
            return self._platform

    def close(self) -> None:
        self._host.close()

    # -- guests -------------------------------------------------------------

    def list_instance_uuids(self) -> list[str]:
        return sorted(Guest(domain).uuid for domain in self._host.list_domains())

    def instance_exists(self, uuid: str) -> bool:
        return self._find(uuid) is not None

    def get_info(self, uuid: str) -> GuestInfo:
        return guest_info(self._get(uuid))

    def block_stats(self, uuid: str) -> dict[str, dict[str, int]]:
        """Counters per disk target of a running guest (libvirt keeps none for a stopped one)."""
        guest = self._get(uuid)
        if not guest.is_active():
            return {}
        stats: dict[str, dict[str, int]] = {}
        for disk in _disks(guest.get_config()):
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

    def guest_xml(self, spec: GuestSpec) -> str:
        """The domain XML ``spawn`` defines for ``spec`` on this hypervisor."""
        return design_guest(spec, self._guest_platform(), self.instances_path).to_xml()

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
            LOG.info("host %s: defined guest %s", self._host_name, spec.uuid)
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
        try:
            guest.launch()
        except HypervisorError:
            LOG.warning("host %s: guest %s did not start, undefining", self._host_name, guest.uuid)
            guest.delete_configuration()
            raise
        LOG.info("host %s: started guest %s", self._host_name, guest.uuid)

    def destroy(self, uuid: str) -> None:
        """Stop and undefine; a guest that is not there is already destroyed."""
        guest = self._find(uuid)
        if guest is None:
            return
        if guest.is_active():
            guest.poweroff()
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

    # -- power --------------------------------------------------------------

    def power_off(self, uuid: str) -> None:
        guest = self._get(uuid)
        if guest.is_active():
            guest.poweroff()

    def power_on(self, uuid: str) -> None:
        guest = self._get(uuid)
        state = guest.get_power_state()
        if state == power_state.PAUSED:
            guest.resume()
        elif state != power_state.RUNNING:
            if guest.is_active():  # crashed but kept by on_crash=preserve
                guest.poweroff()
            guest.launch()

    def reboot(self, uuid: str, hard: bool) -> None:
        """Soft: ask the guest OS, else hard as Nova does. Hard: off, then a fresh boot."""
        guest = self._get(uuid)
        if not hard and guest.get_power_state() == power_state.RUNNING:
            try:
                guest.reboot()
                return
            except HypervisorError as exc:
                LOG.warning(
                    "host %s: soft reboot of %s failed (%s), rebooting hard",
                    self._host_name,
                    uuid,
                    exc,
                )
        self._hard_reboot(guest)

    def _hard_reboot(self, guest: Guest) -> None:
        if guest.is_active():
            guest.poweroff()
        if guest.has_saved_memory_state():
            guest.discard_saved_memory_state()
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

    # -- helpers ------------------------------------------------------------

    def _find(self, uuid: str) -> Guest | None:
        try:
            return self._get(uuid)
        except DomainNotFound:
            return None

    def _get(self, uuid: str) -> Guest:
        return Guest(self._host.lookup_domain(uuid))


def _is_suspended(guest: Guest) -> bool:
    return not guest.is_active() and guest.has_saved_memory_state()


def _refuse(action: str, uuid: str, state: int) -> HypervisorError:
    name = power_state.NAMES.get(state, str(state))
    return HypervisorError(reason=f"cannot {action} guest {uuid} while it is {name}")


def guest_info(guest: Guest) -> GuestInfo:
    """The live view of ``guest``."""
    xml = guest.get_xml()
    config = LibvirtConfigGuest.from_xml(xml)
    vcpus, memory_mb = guest.get_resources()
    return GuestInfo(
        uuid=guest.uuid,
        name=guest.name,
        power_state=guest.get_power_state(),
        vcpus=vcpus,
        memory_mb=memory_mb,
        pci_addresses=tuple(hostdev.address for hostdev in config.hostdevs),
        xml=xml,
    )


def _disks(config: LibvirtConfigGuest) -> list[LibvirtConfigGuestDisk]:
    return [d for d in config.devices if isinstance(d, LibvirtConfigGuestDisk)]


def guest_devices(config: LibvirtConfigGuest) -> dict[str, Any]:
    """The JSON view of what a domain is attached to (``ComputeDriver.guest_devices``)."""
    consoles = [d for d in config.devices if isinstance(d, LibvirtConfigGuestConsole)]
    return {
        "disks": [
            {"target_dev": d.target_dev, "source_path": d.source_path, "bus": d.target_bus}
            for d in _disks(config)
        ],
        "pci_devices": [hostdev.address for hostdev in config.hostdevs],
        "consoles": [
            {"type": c.type, "target_type": c.target_type, "port": c.target_port} for c in consoles
        ],
    }


def pci_device(xml: str) -> PciDevice:
    """A ``PciDevice`` from PCI node device XML."""
    dev = LibvirtConfigNodeDevicePci.from_xml(xml)
    dev_type = next((_DEV_TYPES[c] for c in dev.sub_capabilities if c in _DEV_TYPES), "type-PCI")
    return PciDevice(dev.address, dev.vendor_id, dev.product_id, dev.numa_node, dev_type)


def cpu_info(caps: LibvirtConfigCaps, node: NodeInfo) -> dict[str, Any]:
    """Nova's ``cpu_info``: arch, model, vendor, topology, features (JSON types only)."""
    topology = {
        "cells": node.nodes,
        "sockets": caps.host_topology.get("sockets", node.sockets),
        "cores": caps.host_topology.get("cores", node.cores),
        "threads": caps.host_topology.get("threads", node.threads),
    }
    return {
        "arch": caps.host_arch,
        "model": caps.host_model,
        "vendor": caps.host_vendor,
        "topology": topology,
        "features": sorted(caps.host_features),
    }


def filesystem_bytes(path: Path) -> int:
    """Size of the file system holding ``path`` (or its nearest existing parent)."""
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    stats = os.statvfs(existing)
    return stats.f_frsize * stats.f_blocks
