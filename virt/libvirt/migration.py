"""The disk side of a cold move (resize or cold migration) between instance directories:
Nova's ``migrate_disk_and_power_off`` and the disk part of ``finish_migration``.

The source renames ``<uuid>`` to ``<uuid>_resize``: the originals, kept until confirm or
revert. What travels is each disk but swap (the destination makes a new one, as Nova
does) and ``disk.info``. Across machines the destination pulls them (``pull_disks``) from
the source's disk endpoint (``virt.transfer``: a signed GET per file, verified against
the SHA-256 the endpoint sends, written sparse under a temporary name, then renamed; a
source that does not answer is tried again a few times), so no host ever writes into
another's directory. Without an endpoint (a cluster with no ``[transfer] secret``, one
machine) and for a same-host resize the source copies them into the destination's
``<instances_path>/<uuid>`` itself (``copy_disks``), a local path.
Either way a half-copied disk is never taken for a whole one, and both are safe to run
again after an interruption: the originals stay in ``_resize`` and the copies are made
again.

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
from virt.transfer.download import fetch_to_file, shown
from virt.transfer.names import disk_path
from virt.transfer.signing import TransferKey, signed_url

LOG = logging.getLogger(__name__)

#: What travels: the disks a guest keeps (swap is made new) and their formats.
COPIED: Final = (ROOT, EPHEMERAL, DISK_INFO)
#: Tries of each file a destination pulls: a source that does not answer (its worker,
#: which serves the disks, restarting) or a dropped connection is ridden out over about
#: 7 s (waits of 1, 2 and 4 s) before the move fails; a refusal or bad data fails at once.
PULL_ATTEMPTS: Final = 4


def move_aside(files: InstanceFiles, uuid: str) -> Path:
    """``<uuid>`` moved aside to ``<uuid>_resize`` (already there: left as it is)."""
    try:
        return files.move_to_resize(uuid)
    except FileNotFoundError as exc:
        raise HypervisorError(reason=f"guest {uuid} has no instance files to move") from exc


def copy_disks(files: InstanceFiles, uuid: str, dest_instances_path: Path) -> Path:
    """Move ``<uuid>`` aside to ``<uuid>_resize`` and copy its disks into the destination's
    directory (a local path); returns that directory."""
    source = move_aside(files, uuid)
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


def pull_disks(files: InstanceFiles, uuid: str, endpoint: str, key: TransferKey) -> Path:
    """On the destination: the moved-aside disks of ``uuid`` fetched from the source's disk
    endpoint ``endpoint`` into ``<uuid>``; returns that directory. Each file is fetched
    again (a redelivery finds the source's originals unchanged and replaces whatever an
    interrupted attempt left); one the source does not have is not kept here either."""
    target = files.path(uuid)
    target.mkdir(parents=True, exist_ok=True)
    for name in sorted(COPIED, key=lambda n: n != DISK_INFO):  # disk.info first: fail fast
        url = signed_url(key, endpoint, disk_path(uuid, name))
        if fetch_to_file(url, target / name, attempts=PULL_ATTEMPTS):
            continue
        if name == DISK_INFO:
            raise HypervisorError(
                reason=f"the source {shown(endpoint)} has no moved-aside disks of {uuid}"
            )
        (target / name).unlink(missing_ok=True)
    LOG.info("Pulled the disks of %s from %s into %s", uuid, shown(endpoint), target)
    return target


def adopt_disks(backend: ImageBackend, directory: Path, spec: GuestSpec) -> dict[str, str]:
    """On the destination: the copied disks made this host's and sized for ``spec``, the
    missing ones made; path -> format of every disk."""
    backend.localize_backing(directory, spec)
    if spec.root_gb:
        backend.grow(directory / ROOT, spec.root_gb * GIB)
    if spec.ephemeral_gb:
        backend.grow(directory / EPHEMERAL, spec.ephemeral_gb * GIB)
    return backend.create_disks(spec, directory)
