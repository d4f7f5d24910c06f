"""The image store and the checks of an upload: Glance's part of novaq.

The store is a directory (``[glance] store_path``, default ``<state_dir>/images``); an
image's data is ``<store>/<id>``. An upload (a local file, or an ``http(s)://`` URL
fetched as Glance's web-download does) is copied in under a temporary name while its
SHA-256 and size are computed, then inspected with ``qemu-img info`` (format and virtual
size, as Glance's format inspector does) and only then renamed into place.

Nothing here touches the database; ``workflows/api/images.py`` orders the writes.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid as uuid_module
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from models import ContainerFormat, DiskFormat
from novaq.exceptions import ImageStoreError, InvalidImage
from novaq.settings import Settings
from scheduler import image_meta_props

LOG = logging.getLogger(__name__)

CHUNK = 1024 * 1024
QEMU_IMG_TIMEOUT_S = 60
DOWNLOAD_TIMEOUT_S = 60
MAX_NAME = 255
MAX_VALUE = 255

# Whole numbers: the shutdown timeout (``compute.power``) and the physical address bits
# ImagePropertiesFilter compares; refused when negative (Nova's metadata takes any integer
# for the bits).
NON_NEGATIVE_INTS = ("os_shutdown_timeout", "hw_maxphysaddr_bits")


@dataclass(frozen=True, slots=True)
class Upload:
    """A checked image-create request (sizes: min_disk GB, min_ram MB)."""

    name: str
    source: Path | str  # a local file, or an http(s):// URL (Glance's web-download)
    disk_format: str
    container_format: str
    min_disk: int
    min_ram: int
    properties: dict[str, str]


@dataclass(frozen=True, slots=True)
class StoredData:
    """What the store learnt while taking the data in (sizes in bytes)."""

    location: str
    size: int
    virtual_size: int
    sha256: str


def store_path(settings: Settings) -> Path:
    return settings.image_store_path.resolve()


# -- checking a request ----------------------------------------------------------------------


def check_upload(
    name: str,
    path: str | os.PathLike[str] | None,
    disk_format: str | None,
    container_format: str,
    min_disk: int,
    min_ram: int,
    properties: Mapping[str, str] | None,
) -> Upload:
    """The request as an ``Upload``, or ``InvalidImage`` naming what is wrong. Types are
    the API's to check (``workflows.api.validation``); values are checked here."""
    if not name.strip() or len(name) > MAX_NAME:
        raise InvalidImage(reason=f"name must be a non-empty string of at most {MAX_NAME}")
    return Upload(
        name=name,
        source=_check_source(path),
        disk_format=_check_choice("disk_format", disk_format, DiskFormat),
        container_format=_check_choice("container_format", container_format, ContainerFormat),
        min_disk=_check_size("min_disk", min_disk),
        min_ram=_check_size("min_ram", min_ram),
        properties=check_properties(properties),
    )


def _check_source(path: str | os.PathLike[str] | None) -> Path | str:
    if path is None or not str(path):
        raise InvalidImage(reason=f"path must name a local file or a URL, got {path!r}")
    if isinstance(path, str) and path.startswith(("http://", "https://")):
        if not urllib.parse.urlsplit(path).hostname:
            raise InvalidImage(reason=f"no host in the URL {path!r}")
        return path
    source = Path(path)
    if not source.is_file():
        raise InvalidImage(reason=f"no such file: {source}")
    if not os.access(source, os.R_OK):
        raise InvalidImage(reason=f"cannot read {source}")
    return source


def _check_choice(
    field: str, value: str | None, choices: type[DiskFormat | ContainerFormat]
) -> str:
    allowed = [c.value for c in choices]
    if value not in allowed:
        raise InvalidImage(reason=f"{field} must be one of {', '.join(allowed)}, not {value!r}")
    return str(value)


def _check_size(field: str, value: int) -> int:
    if value < 0:
        raise InvalidImage(reason=f"{field} must be an integer >= 0, got {value!r}")
    return value


def check_properties(properties: Mapping[str, str] | None) -> dict[str, str]:
    """Names and values must be strings; the properties Nova reads must hold values Nova's
    image metadata takes (``scheduler.image_meta_props``: an architecture, a hypervisor
    type, a boolean, an integer, a version requirement, ...), as Nova's API checks them
    at boot. They are stored as given (``amd64`` stays ``amd64``)."""
    if properties is None:
        return {}
    checked: dict[str, str] = {}
    for key, value in properties.items():
        if not key or len(key) > MAX_NAME:
            raise InvalidImage(reason=f"property name {key!r} must be a non-empty string")
        if len(value) > MAX_VALUE:
            raise InvalidImage(
                reason=f"property {key} must be a string of at most {MAX_VALUE}, got {value!r}"
            )
        if key in NON_NEGATIVE_INTS and not value.isdigit():
            raise InvalidImage(reason=f"property {key}={value!r} must be an integer >= 0")
        checked[key] = value
    try:
        image_meta_props.read(checked)
    except ValueError as exc:
        raise InvalidImage(reason=f"property {exc}") from None
    return checked


# -- taking the data in ------------------------------------------------------------------------


def store_data(settings: Settings, image_id: str, upload: Upload) -> StoredData:
    """Copy the upload to ``<store>/<image_id>`` (SHA-256 and size computed on the way),
    check its format; on any failure nothing is left in the store."""
    store = store_path(settings)
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ImageStoreError(reason=f"cannot create {store}: {exc}") from exc
    final = store / image_id
    partial = store / f".{image_id}.{uuid_module.uuid4().hex}.part"
    try:
        size, sha256 = _copy_hashing(upload.source, partial)
        virtual_size = _inspect(partial, upload.disk_format)
        os.replace(partial, final)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return StoredData(str(final), size, virtual_size, sha256)


def _copy_hashing(source: Path | str, target: Path) -> tuple[int, str]:
    if isinstance(source, str):
        return _download_hashing(source, target)
    try:
        with source.open("rb") as src:
            return _stream(src, target)
    except OSError as exc:
        raise ImageStoreError(reason=f"cannot copy {source} into the store: {exc}") from exc


def _download_hashing(url: str, target: Path) -> tuple[int, str]:
    """Glance's web-download: the data fetched from ``url`` straight into the store."""
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            return _stream(response, target)
    except urllib.error.HTTPError as exc:
        raise InvalidImage(reason=f"cannot fetch {url}: HTTP {exc.code} {exc.reason}") from exc
    except (urllib.error.URLError, TimeoutError, http.client.HTTPException) as exc:
        raise InvalidImage(reason=f"cannot fetch {url}: {exc}") from exc
    except OSError as exc:  # the connection dropped, or the store's disk failed
        raise ImageStoreError(reason=f"cannot fetch {url} into the store: {exc}") from exc


def _stream(src: BinaryIO, target: Path) -> tuple[int, str]:
    """Copy ``src`` into the new file ``target``; its size in bytes and SHA-256 in hex."""
    digest, size = hashlib.sha256(), 0
    with target.open("xb") as dst:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            dst.write(chunk)
            size += len(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    return size, digest.hexdigest()


def qemu_img_info(path: Path) -> dict[str, Any]:
    """``qemu-img info --output=json`` of ``path``, the format probed (never assumed)."""
    try:
        done = subprocess.run(
            ["qemu-img", "info", "--output=json", str(path)],
            capture_output=True,
            text=True,
            timeout=QEMU_IMG_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError as exc:
        raise ImageStoreError(
            reason="qemu-img is not installed (Debian package qemu-utils); it reads an "
            "image's format and virtual size"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise ImageStoreError(reason=f"qemu-img info {path} took over {exc.timeout} s") from exc
    if done.returncode != 0:
        raise InvalidImage(reason=f"qemu-img cannot read the data: {done.stderr.strip()}")
    info: dict[str, Any] = json.loads(done.stdout)
    return info


def _inspect(path: Path, disk_format: str) -> int:
    """The virtual size in bytes, once the data is known to be ``disk_format``. A qcow2
    with a backing file or an external data file is refused, as Glance's inspector does:
    booting it would read a file outside the image."""
    info = qemu_img_info(path)
    actual = info.get("format")
    if actual != disk_format:
        raise InvalidImage(
            reason=f"the data is in {actual} format, but disk_format says {disk_format}"
        )
    if info.get("backing-filename") or info.get("full-backing-filename"):
        raise InvalidImage(reason="a qcow2 image with a backing file is not accepted")
    data_file = (info.get("format-specific") or {}).get("data", {}).get("data-file")
    if data_file:
        raise InvalidImage(reason="a qcow2 image with an external data file is not accepted")
    return int(info.get("virtual-size") or 0)


def remove_data(location: str | None) -> None:
    """Remove an image's data from the store; a file already gone is fine."""
    if not location or "://" in location:
        return
    try:
        Path(location).unlink(missing_ok=True)
    except OSError as exc:
        LOG.warning("image data %s could not be removed: %s", location, exc)
