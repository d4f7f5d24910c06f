"""Tiny real images for tests of the image backend: a raw file of a few KiB with data at
its start (the rest a hole) and a qcow2 made by ``qemu-img``, each described by the
``ImageSpec`` an image registry would give (location, format, sha256, sizes)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from virt.driver import ImageSpec

MIB = 1024**2


def _spec(path: Path, image_id: str, disk_format: str, **properties: str) -> ImageSpec:
    data = path.read_bytes()
    return ImageSpec(
        id=image_id,
        name=image_id,
        location=str(path),
        disk_format=disk_format,
        checksum=hashlib.sha256(data).hexdigest(),
        size=len(data),
        virtual_size=int(qemu_img_info(path)["virtual-size"]),
        properties=tuple(sorted(properties.items())),
    )


def make_raw_image(
    directory: Path, image_id: str = "cirros", size: int = MIB, **properties: str
) -> ImageSpec:
    """A raw image of ``size`` bytes (sparse) whose first bytes name it."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{image_id}.raw"
    with open(path, "wb") as handle:
        handle.write(f"novaq test image {image_id}\n".encode())
        handle.truncate(size)
    return _spec(path, image_id, "raw", **properties)


def make_qcow2_image(directory: Path, image_id: str = "qcow", size: int = 2 * MIB) -> ImageSpec:
    """A qcow2 image of ``size`` virtual bytes."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{image_id}.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), str(size)], check=True)
    return _spec(path, image_id, "qcow2")


def qemu_img_info(path: Path, chain: bool = False) -> Any:
    """What ``qemu-img info --output=json`` says (a list of layers with ``chain``)."""
    args = ["qemu-img", "info", "--output=json", *(["--backing-chain"] if chain else []), str(path)]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)
