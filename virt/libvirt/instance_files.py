"""Each guest's directory ``<instances_path>/<uuid>/``, as Nova's libvirt driver keeps it.

Nova's directory holds the disks, ``disk.info`` (JSON: disk path -> format) and
``console.log``. novaq's guests run on libvirt's test driver, which never opens a disk,
so the directory holds only ``disk.info`` for the disks ``designer.design_disks`` names:
real enough to be found, counted and cleaned, without writing disk-sized files.

Deletion is Nova's ``LibvirtDriver.delete_instance_files``: rename the directory to
``<uuid>_del`` (atomic, so two deleters never race inside it), remove that, and report
success only when neither path is left; a ``_del`` directory left by an interrupted
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

LOG = logging.getLogger(__name__)

DISK_INFO: Final = "disk.info"
DELETING_SUFFIX: Final = "_del"


class InstanceFiles:
    """The instance directories of one ``instances_path``."""

    def __init__(self, instances_path: Path) -> None:
        self.instances_path = instances_path

    def path(self, uuid: str) -> Path:
        return self.instances_path / uuid

    def create(self, uuid: str, disk_formats: dict[str, str]) -> bool:
        """Make the directory and (re)write its ``disk.info`` for the guest's current disks;
        True if this call created the directory."""
        directory = self.path(uuid)
        created = not directory.exists()
        directory.mkdir(parents=True, exist_ok=True)
        content = json.dumps(disk_formats, sort_keys=True) + "\n"
        (directory / DISK_INFO).write_text(content, encoding="utf-8")
        return created

    def exist(self, uuid: str) -> bool:
        target = self.path(uuid)
        return target.exists() or _deleting(target).exists()

    def delete(self, uuid: str) -> bool:
        """Remove the directory (Nova's steps and log lines); True when it is gone."""
        target = self.path(uuid)
        target_del = _deleting(target)
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
