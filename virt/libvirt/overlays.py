"""qcow2 overlays of base files, made by ``qemu-img create`` once per kind and copied after
(issue 16: a ``qemu-img`` process per boot, about 7 ms of CPU and 20 ms under load).

An overlay ``qemu-img create -f qcow2 -b <base> -F <format> <size>`` makes is the same
bytes whatever its own name and whenever it is made: a header naming the base, and
empty tables. So the first overlay of a (base, format, size) is made by ``qemu-img``,
its bytes are kept, and every later one is those bytes written and synced as
``qemu-img`` syncs them: the same file.

NOTE: kept per base path with the base's device, inode and size (as
``virt.libvirt.base_info``): a base is only ever renamed into place, so a new base is
a new inode and is checked by ``qemu-img`` again. A few kinds are kept (a host boots a
few images at a few sizes), the least recently used going first.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Final

from virt.libvirt import qemu_img

#: How many kinds of overlay are kept (each about 192 KiB).
KEPT: Final = 8

_Kind = tuple[Path, tuple[int, int, int], str, int]


class OverlayMaker:
    """Makes overlays of base files, ``qemu-img`` asked once per kind."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._known: OrderedDict[_Kind, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def create(self, path: Path, size_bytes: int, base: Path, base_format: str) -> None:
        """A new qcow2 file at ``path``: ``qemu_img.create(path, size_bytes, base,
        base_format)``'s bytes."""
        # NOTE: stat before: a base replaced in between is kept under the old identity,
        # so the next overlay of it asks qemu-img again (never a stale header kept).
        stat = base.stat()
        kind = (base, (stat.st_dev, stat.st_ino, stat.st_size), base_format, size_bytes)
        with self._lock:
            data = self._known.get(kind)
            if data is not None:
                self._known.move_to_end(kind)
        if data is None:
            qemu_img.create(path, size_bytes, base, base_format)
            self._keep(kind, path.read_bytes())
            return
        _write_synced(path, data)

    def _keep(self, kind: _Kind, data: bytes) -> None:
        with self._lock:
            self._known[kind] = data
            while len(self._known) > self._kept:
                self._known.popitem(last=False)


def _write_synced(path: Path, data: bytes) -> None:
    """``data`` as a new file, mode 0644 as ``qemu-img`` makes it, synced as it syncs it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fdatasync(fd)
    finally:
        os.close(fd)
