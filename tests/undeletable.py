"""Make a real directory that cannot be deleted, for tests of file cleanup that fails.

Nothing is mocked: the deletion really fails in the operating system. An unprivileged
user gets a read-only directory (its files cannot be unlinked); root ignores permissions,
so for root the directory is made immutable (``chattr +i``, which needs a file system and
capability that allow it; the test is skipped otherwise). Leaving the context makes the
directory, wherever a rename moved it (``<uuid>_del``), deletable again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def undeletable(directory: Path) -> Iterator[None]:
    if os.geteuid() == 0:
        _chattr("+i", directory)
    else:
        directory.chmod(0o500)
    try:
        yield
    finally:
        release(directory)


def release(directory: Path) -> None:
    """Make ``directory`` (or its ``_del`` twin after a rename) deletable again."""
    for path in (directory, directory.with_name(directory.name + "_del")):
        if not path.exists():
            continue
        if os.geteuid() == 0:
            _chattr("-i", path)
        else:
            path.chmod(0o700)


def _chattr(flag: str, path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("root needs chattr to make a directory undeletable")
    done = subprocess.run(["chattr", flag, str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"chattr {flag} is not possible here: {done.stderr.strip()}")
