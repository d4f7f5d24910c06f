"""The state directory is private to its owner: directories 0700, files 0600.

The state directory holds the SQLite database, the logs, beat's schedule, the embedded
broker's password and URL, the cluster's TOML and Flower's operator credential; none of it
is any other local user's business. The launcher creates what it writes with these modes,
runs every child under :data:`PRIVATE_UMASK` (so the database's ``-wal``/``-shm``, beat's
schedule and Redis's dump are born private), and :func:`tighten_tree` strips the group and
other bits from whatever an older run left behind.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The umask of every process the launcher starts: no bit for group or other.
PRIVATE_UMASK = 0o077
PRIVATE_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) and make ``path`` itself 0700."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, PRIVATE_DIR_MODE)
    return path


def write_private_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as a 0600 file, even if it existed with a wider mode."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        # NOTE: O_CREAT's mode applies only to a new file; fchmod covers an old one.
        os.fchmod(handle.fileno(), PRIVATE_FILE_MODE)
        handle.write(text)


def open_private_append(path: Path) -> int:
    """A file descriptor appending to ``path``, which is (made) 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    os.fchmod(fd, PRIVATE_FILE_MODE)
    return fd


def tighten_tree(root: Path) -> None:
    """Remove the group and other bits from ``root`` and everything under it.

    Symbolic links are neither followed nor changed: what they point at is not ours.
    """
    if not root.is_dir() or root.is_symlink():
        return
    os.chmod(root, PRIVATE_DIR_MODE)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            mode = path.stat().st_mode & 0o7777
            if mode & 0o077:
                os.chmod(path, mode & ~0o077)
