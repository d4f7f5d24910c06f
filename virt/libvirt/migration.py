"""The disk side of a cold move (resize or cold migration) between instance directories:
Nova's ``migrate_disk_and_power_off`` copy and the disk part of ``finish_migration``.

The source renames ``<uuid>`` to ``<uuid>_resize`` and copies each disk but swap (the
destination makes a new one, as Nova does) and ``disk.info`` into the destination's
``<instances_path>/<uuid>``. On one machine that is a local path: another simulated
host's directory, or the same one for a same-host resize. Across machines it needs a
shared file system mounted at the destination's ``instances_path`` on the source; there
is no network transport yet (Nova's is ssh/rsync). Each copy goes to a temporary name
first, so a half-copied disk is never taken for a whole one.

On the destination the copied overlays are pointed at its own base files, the root disk
grown to the new ``root_gb`` (``qemu-img resize``), the ephemeral disk grown to the new
``ephemeral_gb`` (its file system is not, as in Nova) or made new, and a swap disk of
the new size made. Refuses to shrink anything: ``check_can_resize`` raises before a
single file moves (``virt.driver.check_can_resize``, Nova's "Unable to resize disk down.").
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Final

from novaq.exceptions import HypervisorError
from virt.driver import GuestSpec
from virt.libvirt import qemu_img
from virt.libvirt.imagebackend import EPHEMERAL, GIB, ROOT, ImageBackend
from virt.libvirt.instance_files import DISK_INFO, InstanceFiles

LOG = logging.getLogger(__name__)

#: What travels: the disks a guest keeps (swap is made new) and their formats.
COPIED: Final = (ROOT, EPHEMERAL, DISK_INFO)


def copy_disks(files: InstanceFiles, uuid: str, dest_instances_path: Path) -> Path:
    """Move ``<uuid>`` aside to ``<uuid>_resize`` and copy its disks into the destination's
    directory; returns that directory. Safe to run again after an interruption: the
    originals stay in ``_resize`` and the copies are made again."""
    try:
        source = files.move_to_resize(uuid)
    except FileNotFoundError as exc:
        raise HypervisorError(reason=f"guest {uuid} has no instance files to move") from exc
    target = dest_instances_path / uuid
    target.mkdir(parents=True, exist_ok=True)
    for name in COPIED:
        if (source / name).exists():
            _copy(source / name, target / name)
    LOG.info("Copied the disks of %s from %s to %s", uuid, source, target)
    return target


def _copy(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.part")
    tmp.unlink(missing_ok=True)
    try:
        qemu_img.copy_sparse(source, tmp)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def adopt_disks(backend: ImageBackend, directory: Path, spec: GuestSpec) -> dict[str, str]:
    """On the destination: the copied disks made this host's and sized for ``spec``, the
    missing ones made; path -> format of every disk."""
    backend.localize_backing(directory, spec)
    if spec.root_gb:
        backend.grow(directory / ROOT, spec.root_gb * GIB)
    if spec.ephemeral_gb:
        backend.grow(directory / EPHEMERAL, spec.ephemeral_gb * GIB)
    return backend.create_disks(spec, directory)
