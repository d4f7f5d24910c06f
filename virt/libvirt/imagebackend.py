"""A guest's disk files: Nova's ``imagebackend`` (its Qcow2 backend) and the disk
parts of ``LibvirtDriver._create_image``, on ``qemu-img``.

In ``<instances_path>/<uuid>/``: ``disk``, the root disk, a qcow2 overlay of the
image's base file (``_base/<sha1(image id)>``) with the flavor's ``root_gb`` (0: the
image's own virtual size, as Nova); ``disk.eph0`` when the flavor has ephemeral GiB,
an overlay of ``_base/ephemeral_<GiB>_<fs hash>``, a raw file formatted as Nova formats
it (vfat labelled ``ephemeral0``, ext4 for ``os_type=linux``, ntfs for ``windows``);
``disk.swap`` when it has swap MiB, an overlay of ``_base/swap_<MiB>`` (mkswap). With
``use_cow_images`` off each disk is instead a standalone qcow2 copy of its base, grown
to size. ``disk.info`` lists each disk and its format. An overlay of a kind already made
(same base, format and size) is a copy of that one's bytes (``virt.libvirt.overlays``).

Differs from Nova, and why: without copy-on-write Nova's Flat backend keeps raw files;
novaq keeps qcow2 (a full copy, no backing file) so every disk has one format whatever
the option, and a copied disk stays as small as its data. An image with no location
(the stand-in until an image registry names one) gives a blank root disk.

Only missing disks are created, each under a temporary name renamed into place, so a
redelivered spawn or a finish after a copy never overwrites a disk, and an interrupted
one never leaves a half-made disk under the real name. Refuses to decide anything
about domains: ``virt.libvirt.driver`` defines and starts them.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from novaq.exceptions import HypervisorError, ImageUnacceptable
from virt.driver import GuestSpec, ImageSpec
from virt.libvirt import qemu_img
from virt.libvirt.base_info import BaseInfoCache
from virt.libvirt.imagecache import ImageCache
from virt.libvirt.overlays import OverlayMaker
from virt.transfer.image_source import ImageServers
from virt.transfer.signing import TransferKey

LOG = logging.getLogger(__name__)

GIB: Final = 1024**3
MIB: Final = 1024**2
ROOT, EPHEMERAL, SWAP, RESCUE = "disk", "disk.eph0", "disk.swap", "disk.rescue"
DISK_FORMAT: Final = "qcow2"
EPHEMERAL_LABEL: Final = "ephemeral0"
_FS_BY_OS_TYPE: Final = {"linux": "ext4", "windows": "ntfs"}
_DEFAULT_FS: Final = "vfat"  # Nova's _DEFAULT_FILE_SYSTEM, for an image with no os_type


class DiskTooSmall(ImageUnacceptable):
    msg_fmt = (
        "Flavor's disk is too small for requested image. Flavor disk is "
        "%(flavor_size)i bytes, image is %(image_size)i bytes."
    )


@dataclass(frozen=True, slots=True)
class DiskOptions:
    """Nova's ``[DEFAULT] use_cow_images`` and ``force_raw_images`` (both default True);
    ``image_servers``: where image data is fetched from (``[glance] api_servers``);
    ``transfer_key``: what signs the pull of a moved disk (``[transfer] secret``)."""

    use_cow_images: bool = True
    force_raw_images: bool = True
    image_servers: ImageServers = ImageServers()
    transfer_key: TransferKey | None = None


def disk_names(spec: GuestSpec) -> list[str]:
    """The disk files of ``spec``, in device order (as ``designer.design_disks``)."""
    names = [ROOT]
    if spec.ephemeral_gb:
        names.append(EPHEMERAL)
    if spec.swap_mb:
        names.append(SWAP)
    return names


def ephemeral_fs(image: ImageSpec | None) -> str:
    os_type = image.prop("os_type") if image is not None else None
    return _FS_BY_OS_TYPE.get(os_type or "", _DEFAULT_FS)


def ephemeral_base_name(size_gb: int, fs_type: str) -> str:
    """Nova's ``ephemeral_<GiB>_<md5 of the file system>[:7]``."""
    return f"ephemeral_{size_gb}_{hashlib.md5(fs_type.encode()).hexdigest()[:7]}"  # noqa: S324


class ImageBackend:
    """Creates the disks of guests under one ``instances_path``."""

    def __init__(self, cache: ImageCache, options: DiskOptions) -> None:
        self.cache = cache
        self.options = options
        self._base_info = BaseInfoCache()
        self._overlays = OverlayMaker()

    # -- bases --------------------------------------------------------------

    def image_base(self, image: ImageSpec | None) -> Path | None:
        """The base file of ``image`` (fetched if needed), None if it has no data."""
        if image is None or not image.location:
            return None
        return self.cache.fetch(image, self.options.force_raw_images, self.options.image_servers)

    def _ephemeral_base(self, size_gb: int, fs_type: str) -> Path:
        def make(path: Path) -> None:
            _sparse_file(path, size_gb * GIB)
            qemu_img.make_filesystem(path, fs_type, EPHEMERAL_LABEL)

        return self.cache.ensure(ephemeral_base_name(size_gb, fs_type), make)

    def _swap_base(self, size_mb: int) -> Path:
        def make(path: Path) -> None:
            _sparse_file(path, size_mb * MIB)
            qemu_img.make_filesystem(path, "swap", "")

        return self.cache.ensure(f"swap_{size_mb}", make)

    # -- disks --------------------------------------------------------------

    def create_disks(self, spec: GuestSpec, directory: Path) -> dict[str, str]:
        """Create the missing disks of ``spec`` in ``directory``; path -> format of all."""
        self.create_root(directory / ROOT, spec.image, spec.root_gb)
        if spec.ephemeral_gb:
            base = self._ephemeral_base(spec.ephemeral_gb, ephemeral_fs(spec.image))
            self._create_from(directory / EPHEMERAL, base, "raw", spec.ephemeral_gb * GIB)
        if spec.swap_mb:
            base = self._swap_base(spec.swap_mb)
            self._create_from(directory / SWAP, base, "raw", spec.swap_mb * MIB)
        return {str(directory / name): DISK_FORMAT for name in disk_names(spec)}

    def create_root(self, path: Path, image: ImageSpec | None, root_gb: int) -> None:
        """The root disk (or a rescue disk) of ``image`` sized ``root_gb`` (0: the image's)."""
        base = self.image_base(image)
        if path.exists():
            return
        if base is None:
            _atomically(path, lambda tmp: qemu_img.create(tmp, root_gb * GIB))
            return
        data = self._base_info.info(base)
        size = root_gb * GIB or data.virtual_size
        if size < data.virtual_size:
            raise DiskTooSmall(flavor_size=size, image_size=data.virtual_size)
        self._create_from(path, base, data.format, size)

    def _create_from(self, path: Path, base: Path, base_format: str, size: int) -> None:
        if path.exists():
            return
        if self.options.use_cow_images:
            _atomically(path, lambda tmp: self._overlays.create(tmp, size, base, base_format))
            return

        def copy(tmp: Path) -> None:
            qemu_img.convert(base, tmp, DISK_FORMAT)
            if qemu_img.virtual_size(tmp) < size:
                qemu_img.resize(tmp, size)

        _atomically(path, copy)

    def grow(self, path: Path, size: int) -> bool:
        """Grow disk ``path`` to ``size`` bytes if smaller (Nova never shrinks); True if
        it grew."""
        if not path.exists() or qemu_img.virtual_size(path) >= size:
            return False
        qemu_img.resize(path, size)
        LOG.info("Grew %s to %d bytes", path, size)
        return True

    def localize_backing(self, directory: Path, spec: GuestSpec) -> None:
        """Point each copied overlay in ``directory`` at this host's own base file of the
        same name (fetched or made here first): a disk copied from another host's
        directory still names that host's ``_base``. Same name, same content, so the
        rebase only rewrites the header (``qemu-img rebase -u``)."""
        for name in (ROOT, EPHEMERAL):
            path = directory / name
            if not path.exists():
                continue
            backing = qemu_img.info(path).get("full-backing-filename")
            if backing is None or Path(backing).parent == self.cache.base_dir:
                continue
            base = self._local_base(Path(backing), spec)
            qemu_img.rebase_unsafe(path, base, qemu_img.file_format(base))
            LOG.info("Rebased %s from %s onto %s", path, backing, base)

    def _local_base(self, remote: Path, spec: GuestSpec) -> Path:
        """This host's base file named as ``remote``: made, fetched from the image store,
        or, for an image the store cannot give, copied from ``remote`` (Nova's
        ``fallback_from_host``)."""
        name = remote.name
        if name.startswith("ephemeral_"):
            return self._ephemeral_base(int(name.split("_")[1]), ephemeral_fs(spec.image))
        base = self.image_base(spec.image)
        if base is not None and base.name == name:
            return base
        if not remote.is_file():
            raise HypervisorError(reason=f"no base file {name} for {spec.uuid} on this host")
        return self.cache.ensure(name, lambda tmp: qemu_img.copy_sparse(remote, tmp))


def _sparse_file(path: Path, size: int) -> None:
    with open(path, "wb") as handle:
        handle.truncate(size)


def _atomically(path: Path, make: Callable[[Path], None]) -> None:
    """Run ``make(tmp)`` and rename ``tmp`` to ``path``; nothing is left on failure."""
    tmp = path.with_name(f".{path.name}.part")
    tmp.unlink(missing_ok=True)
    try:
        make(tmp)
        os.replace(tmp, path)
    except BaseException:
        # NOTE: only on failure: once renamed, there is no ``tmp`` to remove.
        tmp.unlink(missing_ok=True)
        raise
