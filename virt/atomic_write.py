"""One way to replace a small file so that a reader (or a crash) never sees half of it:
write a temporary file in the same directory, fsync it, then ``os.replace`` it over the
target. Used for node XML, persisted guest records and a rescued guest's saved domain."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, content: str) -> None:
    """Write ``content`` (UTF-8) to ``path`` via a temp file in the same directory."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
