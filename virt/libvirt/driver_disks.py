"""``LibvirtDriver``'s operations that move or swap a guest's disks: the driver side of
resize and cold migration (Nova's ``migrate_disk_and_power_off``, ``finish_migration``,
``confirm_migration``, ``finish_revert_migration``) and of rescue (``rescue``,
``unrescue``).

Each is safe to run again after an interruption, because each looks at what exists
before acting: the originals of a move stay in ``<uuid>_resize`` until confirm or
revert, a guest already defined on the destination is only started, a rescue whose
domain already boots ``disk.rescue`` is only started, and ``unrescue.xml`` (the guest's
own domain, saved at rescue) is written once and removed last. Refuses to touch the
database or decide power policy: ``power_on`` comes from compute.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from novaq.exceptions import HypervisorError
from virt import power_state
from virt.atomic_write import write_atomically
from virt.driver import GuestInfo, GuestSpec, ImageSpec, check_can_resize
from virt.libvirt import migration
from virt.libvirt.guest import Guest, guest_info
from virt.libvirt.rescue import (
    RESCUE_DISK,
    UNRESCUE_XML,
    design_rescue_disks,
    is_rescue_domain,
    with_disks,
)

if TYPE_CHECKING:
    from virt.libvirt.host import Host
    from virt.libvirt.imagebackend import ImageBackend
    from virt.libvirt.instance_files import InstanceFiles
    from virt.transfer.signing import TransferKey

LOG = logging.getLogger(__name__)


class DiskOperations:
    """Mixed into ``LibvirtDriver``, whose connection, files and image backend it uses."""

    instances_path: Path
    _files: InstanceFiles
    _backend: ImageBackend
    _host: Host
    _host_name: str

    if TYPE_CHECKING:

        def _find(self, uuid: str) -> Guest | None: ...
        def _get(self, uuid: str) -> Guest: ...
        def _start_new(self, guest: Guest) -> None: ...
        def destroy(self, uuid: str) -> None: ...
        def power_off(self, uuid: str, timeout_s: float = 0) -> None: ...
        def guest_xml(self, spec: GuestSpec) -> str: ...

    # -- resize and cold migration --------------------------------------------

    def migrate_disk_and_power_off(
        self, spec: GuestSpec, new_spec: GuestSpec, dest_instances_path: str | None
    ) -> None:
        """On the source: refuse a shrink (nothing touched), take the guest down, keep
        the originals in ``<uuid>_resize`` and, given a local ``dest_instances_path``,
        copy the disks there (None: the destination pulls them)."""
        check_can_resize(spec, new_spec)
        if self._find(spec.uuid) is not None:
            self.power_off(spec.uuid)  # the driver's stop (a clean shutdown where it is one)
        self.destroy(spec.uuid)
        if dest_instances_path is None:
            migration.move_aside(self._files, spec.uuid)
        else:
            migration.copy_disks(self._files, spec.uuid, Path(dest_instances_path))

    def finish_migration(
        self, spec: GuestSpec, power_on: bool, disks_from: str | None = None
    ) -> GuestInfo:
        """On the destination: the disks pulled from the source's disk endpoint
        ``disks_from`` (None: already here), adopted and grown, the guest defined from
        ``spec`` and started unless the server was stopped."""
        guest = self._find(spec.uuid)
        if guest is None:
            if disks_from is not None:
                migration.pull_disks(self._files, spec.uuid, disks_from, self._transfer_key())
            self._files.make_dir(spec.uuid)
            directory = self._files.path(spec.uuid)
            formats = migration.adopt_disks(self._backend, directory, spec)
            self._files.write_disk_info(spec.uuid, formats)
            guest = self._define(self.guest_xml(spec))
        return self._settle(guest, power_on)

    def _transfer_key(self) -> TransferKey:
        key = self._backend.options.transfer_key
        if key is None:
            raise HypervisorError(
                reason="disks of a move cannot be pulled without [transfer] secret"
            )
        return key

    def confirm_migration(self, uuid: str) -> None:
        """On the source: the originals kept for a revert go."""
        self._files.delete_resize(uuid)

    def finish_revert_migration(self, spec: GuestSpec, power_on: bool) -> GuestInfo:
        """On the source: the originals back in place, the guest defined from ``spec``
        (its old flavor) on them and started unless the server was stopped."""
        guest = self._find(spec.uuid)
        if guest is None:
            self._files.restore_from_resize(spec.uuid)
            self._files.make_dir(spec.uuid)
            formats = self._backend.create_disks(spec, self._files.path(spec.uuid))
            self._files.write_disk_info(spec.uuid, formats)
            guest = self._define(self.guest_xml(spec))
        return self._settle(guest, power_on)

    def _define(self, xml: str) -> Guest:
        guest = Guest(self._host.define_domain(xml))
        LOG.info("host %s: defined guest %s", self._host_name, guest.uuid)
        return guest

    def _settle(self, guest: Guest, power_on: bool) -> GuestInfo:
        if power_on and guest.get_power_state() not in (power_state.RUNNING, power_state.PAUSED):
            guest.launch()
        return guest_info(guest)

    # -- rescue -----------------------------------------------------------------

    def rescue(self, spec: GuestSpec, rescue_image: ImageSpec | None) -> GuestInfo:
        """Nova's libvirt rescue: the guest's domain saved to ``unrescue.xml``, the guest
        destroyed, ``disk.rescue`` made from ``rescue_image``, and a rescue domain
        (rescue disk first, the root disk second) defined and started."""
        guest = self._get(spec.uuid)
        directory = self._files.path(spec.uuid)
        if not is_rescue_domain(_disk_paths(guest)):
            # NOTE: the rescue domain is the guest's own domain with other disks, so it
            # keeps whatever the guest was defined with (name, devices, console).
            own_xml = guest.get_xml()
            xml = with_disks(own_xml, design_rescue_disks(directory, rescue_image))
            write_atomically(directory / UNRESCUE_XML, own_xml)
            self._backend.create_root(directory / RESCUE_DISK, rescue_image, 0)
            self.power_off(spec.uuid)  # Nova's rescue stops the guest first
            guest = self._define(xml)
        LOG.info("host %s: guest %s boots its rescue disk", self._host_name, spec.uuid)
        return self._settle(guest, power_on=True)

    def unrescue(self, uuid: str) -> GuestInfo:
        """Nova's unrescue: the rescue domain destroyed, the saved domain defined again
        and started, ``disk.rescue`` and ``unrescue.xml`` removed."""
        guest = self._get(uuid)
        directory = self._files.path(uuid)
        saved = directory / UNRESCUE_XML
        if is_rescue_domain(_disk_paths(guest)):
            xml = saved.read_text(encoding="utf-8")
            guest.poweroff_if_active()
            guest = self._define(xml)
        info = self._settle(guest, power_on=True)
        (directory / RESCUE_DISK).unlink(missing_ok=True)
        saved.unlink(missing_ok=True)
        LOG.info("host %s: guest %s unrescued", self._host_name, uuid)
        return info


def _disk_paths(guest: Guest) -> list[str]:
    return [disk.source_path for disk in guest.get_config().disks]
