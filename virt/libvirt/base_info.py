"""What ``qemu-img info`` says of a base file (its format and virtual size), asked once
per file rather than at every spawn (issue 16: a subprocess per boot).

NOTE: a base file never changes in place: it is fetched or made under a temporary name
and renamed into place (``virt.libvirt.imagecache``), so a new file is a new inode. The
answer is kept per path with the file's device, inode and size, and asked again when
they differ. Not its mtime: every spawn touches its base (the cache manager's "last
used"), which changes mtime and ctime without changing the data.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from virt.libvirt import qemu_img


@dataclass(frozen=True, slots=True)
class BaseInfo:
    """What a disk created over a base needs to know of it."""

    format: str
    virtual_size: int


class BaseInfoCache:
    """``qemu-img info`` of base files, remembered while each file stays the same file."""

    def __init__(self) -> None:
        self._known: dict[Path, tuple[tuple[int, int, int], BaseInfo]] = {}
        self._lock = threading.Lock()

    def info(self, path: Path) -> BaseInfo:
        # NOTE: stat before asking: a file replaced in between is remembered under the
        # old identity, so the next call asks again (never a stale answer kept).
        stat = path.stat()
        identity = (stat.st_dev, stat.st_ino, stat.st_size)
        with self._lock:
            known = self._known.get(path)
        if known is not None and known[0] == identity:
            return known[1]
        data = qemu_img.info(path)
        answer = BaseInfo(str(data["format"]), int(data["virtual-size"]))
        with self._lock:
            self._known[path] = (identity, answer)
        return answer
