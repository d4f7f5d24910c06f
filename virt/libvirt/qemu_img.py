"""The disk-image tools a host runs (``qemu-img`` from Debian's qemu-utils, ``mkfs``,
``mkswap``, ``cp``), each call one subprocess with its failure translated.

Owns the translation at this boundary: a missing binary (``FileNotFoundError``) or a
non-zero exit becomes ``DiskCommandError`` naming the command line and its stderr, so a
build or a move fails with a message an operator can act on. Refuses any policy: which
disk to create, from what and how large is ``virt.libvirt.imagebackend``'s.
"""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path
from typing import Any, Final

from novaq.exceptions import HypervisorError

LOG = logging.getLogger(__name__)

QEMU_IMG: Final = "qemu-img"
#: Long enough for a multi-GiB local convert or copy; a hung tool must still end.
TIMEOUT_S: Final = 1800


class DiskCommandError(HypervisorError):
    msg_fmt = "Disk command failed: %(command)s: %(reason)s"


def run(*args: str | Path) -> str:
    """Run one command; its stdout, or ``DiskCommandError``."""
    argv = [str(arg) for arg in args]
    command = " ".join(argv)
    LOG.debug("Running %s", command)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise DiskCommandError(
            command=command, reason=f"{argv[0]} is not installed (not found on PATH)"
        ) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DiskCommandError(command=command, reason=str(exc)) from exc
    if done.returncode != 0:
        stderr = done.stderr.strip() or done.stdout.strip() or "no output"
        raise DiskCommandError(command=command, reason=f"exit {done.returncode}: {stderr}")
    return done.stdout


def info(path: Path, backing_chain: bool = False) -> Any:
    """``qemu-img info --output=json`` (a list of layers with ``backing_chain``)."""
    args: list[str | Path] = [QEMU_IMG, "info", "--output=json"]
    if backing_chain:
        args.append("--backing-chain")
    return json.loads(run(*args, path))


def create(
    path: Path, size_bytes: int, backing: Path | None = None, backing_format: str = ""
) -> None:
    """A qcow2 image of ``size_bytes``, an overlay of ``backing`` when given."""
    args: list[str | Path] = [QEMU_IMG, "create", "-q", "-f", "qcow2"]
    if backing is not None:
        args += ["-b", backing, "-F", backing_format]
    run(*args, path, str(size_bytes))


def convert(source: Path, target: Path, out_format: str) -> None:
    """A standalone copy of ``source`` (its whole backing chain) in ``out_format``."""
    run(QEMU_IMG, "convert", "-q", "-O", out_format, source, target)


def resize(path: Path, size_bytes: int, image_format: str = "qcow2") -> None:
    """Grow ``path`` to ``size_bytes`` (never shrinks: callers check first)."""
    run(QEMU_IMG, "resize", "-q", "-f", image_format, path, str(size_bytes))


def rebase_unsafe(path: Path, backing: Path, backing_format: str) -> None:
    """Point overlay ``path`` at ``backing`` without reading data (same content there)."""
    run(QEMU_IMG, "rebase", "-u", "-f", "qcow2", "-b", backing, "-F", backing_format, path)


def virtual_size(path: Path) -> int:
    return int(info(path)["virtual-size"])


def file_format(path: Path) -> str:
    return str(info(path)["format"])


def make_filesystem(path: Path, fs_type: str, label: str) -> None:
    """Format a raw file as Nova's ``unprivileged_mkfs`` does (``swap`` via mkswap)."""
    if fs_type == "swap":
        run("mkswap", path)
        return
    args: list[str | Path] = ["mkfs", "-t", fs_type]
    if fs_type in ("ext3", "ext4", "ntfs"):
        args.append("-F")  # a file, not a block device: do not ask
    args += ["-n" if fs_type in ("vfat", "msdos") else "-L", label, path]
    run(*args)


def copy_sparse(source: Path, target: Path) -> None:
    """Copy a disk file keeping its holes (a raw disk of 20 GiB may hold 10 MiB)."""
    run("cp", "--sparse=always", "--", source, target)
