"""One way to replace a small file so that a reader (or a crash) never sees half of it:
write a temporary file in the same directory, fsync it, then ``os.replace`` it over the
target. Used for node XML, persisted guest records and a rescued guest's saved domain."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomically(path: Path, content: str) -> None:
    """Write ``content`` (UTF-8) to ``path`` via a temp file in the same directory.

    NOTE: the temporary name is this thread's own (``.<name>.<pid>.<thread>.tmp``), opened
    with ``O_TRUNC``, and the bytes go out in ``os.write`` calls: no ``mkstemp`` (random
    names tried with ``O_EXCL``) and no text file object (issue 16: a simulated host writes
    a guest's record at every spawn; 0.29 instead of 0.34-0.48 ms of CPU a write). Two
    writers never share a name; one left by a crash is truncated by the next write."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(content.encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
