"""Each guest's directory ``<instances_path>/<uuid>/``, as Nova's libvirt driver keeps it.

The directory holds the disks (``virt.libvirt.imagebackend`` makes them), ``disk.info``
(JSON: disk path -> format), and during a rescue ``unrescue.xml``. While a resize or
cold migration is in flight the source's directory is ``<uuid>_resize`` (Nova's name):
the original disks, kept until confirm removes them or revert renames them back.

Deletion is Nova's ``LibvirtDriver.delete_instance_files``: rename the directory to
``<uuid>_del`` (atomic, so two deleters never race inside it), remove that, and report
success only when neither path is left; a ``_resize`` directory goes the same way (a
server deleted mid-move), and a ``_del`` directory left by an interrupted
attempt is removed by the next one. A failure is logged and returned as False, never
raised: ``_run_pending_deletes`` retries it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
from pathlib import Path
from typing import Final

from virt.libvirt import qemu_img

LOG = logging.getLogger(__name__)

DISK_INFO: Final = "disk.info"
DELETING_SUFFIX: Final = "_del"
RESIZE_SUFFIX: Final = "_resize"


class InstanceFiles:
    """The instance directories of one ``instances_path``."""

    def __init__(self, instances_path: Path) -> None:
        self.instances_path = instances_path

    def path(self, uuid: str) -> Path:
        return self.instances_path / uuid

    def resize_path(self, uuid: str) -> Path:
        return self.instances_path / f"{uuid}{RESIZE_SUFFIX}"

    def make_dir(self, uuid: str) -> bool:
        """Make the guest's directory; True if this call created it."""
        directory = self.path(uuid)
        try:
            # NOTE: one mkdir, not a stat first (issue 16: made at every spawn).
            directory.mkdir()
        except FileExistsError:
            if not directory.is_dir():
                raise
            return False
        except FileNotFoundError:  # no instances_path yet
            directory.mkdir(parents=True, exist_ok=True)
        return True

    def write_disk_info(self, uuid: str, disk_formats: dict[str, str]) -> None:
        """(Re)write ``disk.info`` for the guest's current disks."""
        content = json.dumps(disk_formats, sort_keys=True) + "\n"
        (self.path(uuid) / DISK_INFO).write_text(content, encoding="utf-8")

    def exist(self, uuid: str) -> bool:
        target = self.path(uuid)
        others = (_deleting(target), self.resize_path(uuid))
        return target.exists() or any(path.exists() for path in others)

    def move_to_resize(self, uuid: str) -> Path:
        """``<uuid>`` becomes ``<uuid>_resize`` (the originals a move copies from and a
        revert restores). Already moved (a redelivery): left as it is."""
        resize = self.resize_path(uuid)
        if not resize.exists():
            os.rename(self.path(uuid), resize)
        return resize

    def restore_from_resize(self, uuid: str) -> None:
        """Nova's revert on the source: ``<uuid>_resize`` back to ``<uuid>``, replacing
        what a same-host resize made there. Nothing to restore: nothing done."""
        resize = self.resize_path(uuid)
        if not resize.exists():
            return
        target = self.path(uuid)
        if target.exists():
            shutil.rmtree(target)
        os.rename(resize, target)

    def delete_resize(self, uuid: str) -> None:
        """Nova's ``_cleanup_resize``: the originals go once the move is confirmed."""
        resize = self.resize_path(uuid)
        if resize.exists():
            shutil.rmtree(resize)
            LOG.info("Deleted the resize originals %s", resize)

    def backing_names(self, disk_names: tuple[str, ...]) -> set[str]:
        """The file names of the base files that the disks ``disk_names`` of every
        instance directory here (kept originals of moves included) are overlays of."""
        used: set[str] = set()
        directories = self.instances_path.iterdir() if self.instances_path.is_dir() else ()
        for directory in directories:
            if directory.name.endswith(DELETING_SUFFIX):
                continue
            for name in disk_names:
                path = directory / name
                if path.is_file():
                    backing = qemu_img.info(path).get("full-backing-filename")
                    if backing:
                        used.add(Path(backing).name)
        return used

    def delete(self, uuid: str) -> bool:
        """Remove the directory (Nova's steps and log lines); True when it is gone."""
        target = self.path(uuid)
        target_del = _deleting(target)
        gone = _delete_via(target, target_del)
        # A move's originals next (Nova's second rename), through the same ``_del`` name.
        return _delete_via(self.resize_path(uuid), target_del) and gone


def _delete_via(target: Path, target_del: Path) -> bool:
    """Rename ``target`` to ``target_del`` and remove that; True when neither is left."""
    if not target.exists() and not target_del.exists():
        return True
    with contextlib.suppress(OSError):  # absent, or cannot be moved: judged below
        os.rename(target, target_del)
    remaining = target if target.exists() else None
    if remaining is None and target_del.exists():
        LOG.info("Deleting instance files %s", target_del)
        remaining = target_del
        try:
            shutil.rmtree(target_del)
        except OSError as exc:
            LOG.error("Failed to cleanup directory %s: %s", target_del, exc)
    if remaining is not None and remaining.exists():
        LOG.info("Deletion of %s failed", remaining)
        return False
    LOG.info("Deletion of %s complete", target_del)
    return True


def _deleting(target: Path) -> Path:
    return target.with_name(target.name + DELETING_SUFFIX)
