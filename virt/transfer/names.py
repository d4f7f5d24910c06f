"""The names the two endpoints serve, and nothing else: ``/images/<image uuid>`` (the
controller's image store) and ``/disks/<instance uuid>/<disk name>`` (a compute host's
moved-aside disks). A name is accepted only in its canonical spelling (a lower-case,
dashed UUID; a disk name from a fixed list), so no path can climb out of its directory.
"""

from __future__ import annotations

import re
import uuid as uuid_module
from collections.abc import Collection
from pathlib import Path
from typing import Final

from virt.transfer.file_server import Resolver

IMAGES: Final = "/images/"
DISKS: Final = "/disks/"
_UUID_TEXT = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def canonical_uuid(text: str) -> str | None:
    """``text`` if it is a UUID as written canonically, else None."""
    if not _UUID_TEXT.match(text):
        return None
    return text if str(uuid_module.UUID(text)) == text else None


def image_path(image_id: str) -> str:
    return f"{IMAGES}{image_id}"


def disk_path(instance_uuid: str, name: str) -> str:
    return f"{DISKS}{instance_uuid}/{name}"


def image_resolver(store: Path) -> Resolver:
    """``/images/<id>`` -> ``<store>/<id>``."""

    def resolve(path: str) -> Path | None:
        image_id = path.removeprefix(IMAGES) if path.startswith(IMAGES) else ""
        return store / image_id if canonical_uuid(image_id) else None

    return resolve


def disk_resolver(instances_path: Path, served: Collection[str], suffix: str) -> Resolver:
    """``/disks/<uuid>/<name>`` -> ``<instances_path>/<uuid><suffix>/<name>`` for a
    ``name`` in ``served`` (the disks of a move kept aside in ``<uuid>_resize``)."""

    def resolve(path: str) -> Path | None:
        rest = path.removeprefix(DISKS) if path.startswith(DISKS) else ""
        uuid, _, name = rest.partition("/")
        if canonical_uuid(uuid) is None or name not in served:
            return None
        return instances_path / f"{uuid}{suffix}" / name

    return resolve
