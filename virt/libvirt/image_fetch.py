"""Bringing an image's data from the image store to a host's ``_base`` file: Nova's
``images.fetch_to_raw`` on an ``ImageSpec``.

The data is streamed from ``ImageSpec.location`` (an absolute file path, or an
``http(s)://`` URL read with urllib), or with ``[glance] api_servers`` from each image
endpoint in turn (``virt.transfer.image_source``: a signed URL, the next endpoint tried
when one cannot be read; none reached: the whole round again a second later, ``[glance]
num_retries`` times, as Nova's glance client retries), into a temporary file in the base
directory, its SHA-256 compared with ``ImageSpec.checksum``, its real format read with
``qemu-img info`` (it must be the format the image declares and have no backing file: a
qcow2 naming a host file would let an image read that file), then with
``force_raw_images`` a qcow2 is converted to raw, and only then renamed to the base file.
Any failure removes the temporary files, so nothing half-fetched is ever cached. Refuses
to lock: the caller (``ImageCache.fetch``) holds the per-image lock.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_fixed

from novaq.exceptions import ImageUnacceptable
from virt.driver import ImageSpec
from virt.libvirt import qemu_img
from virt.transfer.download import copy_sparse, sender_failed, shown
from virt.transfer.image_source import ImageServers

LOG = logging.getLogger(__name__)

URL_TIMEOUT_S: Final = 60
#: Between two rounds over the image endpoints (Nova's glance client sleeps 1 s).
RETRY_INTERVAL_S: Final = 1.0


class ImageFetchError(ImageUnacceptable):
    msg_fmt = "Image %(image)s cannot be used: %(reason)s"


class ImageEndpointUnreachable(ImageFetchError):
    """No answer, a dropped connection or a 5xx: what another try may not meet (an
    endpoint starting or restarting), unlike a refusal or bad data."""


class ImageChecksumError(ImageFetchError):
    msg_fmt = (
        "Image %(image)s failed its checksum: expected sha256 %(expected)s, "
        "the data at %(location)s has %(actual)s"
    )


def fetch_to_base(
    image: ImageSpec, base: Path, force_raw: bool, servers: ImageServers | None = None
) -> None:
    """Make ``base`` hold ``image``'s verified data (raw when ``force_raw``), from the
    first of ``servers``' endpoints that answers (none: ``image.location``); a round
    that reached none is made again ``servers.num_retries`` times."""
    servers = servers or ImageServers()
    retrying = Retrying(
        stop=stop_after_attempt(1 + servers.num_retries),
        wait=wait_fixed(RETRY_INTERVAL_S),
        retry=retry_if_exception_type(ImageEndpointUnreachable),
        before_sleep=lambda state: LOG.warning(
            "image %s: no image endpoint could be read (%s); trying again",
            image.id,
            state.outcome.exception() if state.outcome else "",
        ),
        reraise=True,
    )
    retrying(_one_round, image, base, force_raw, servers)


def _one_round(image: ImageSpec, base: Path, force_raw: bool, servers: ImageServers) -> None:
    """Each endpoint in turn (signed now) until one gives the data; the last failure."""
    candidates = servers.candidates(image)
    for attempt, located in enumerate(candidates, start=1):
        try:
            _fetch_one(located, base, force_raw)
            return
        except ImageChecksumError:
            raise  # the data itself is wrong: another endpoint serves the same store
        except ImageFetchError as exc:
            if attempt == len(candidates):
                raise
            LOG.warning("image %s: %s; trying the next image endpoint", image.id, exc)


def _fetch_one(image: ImageSpec, base: Path, force_raw: bool) -> None:
    fd, name = tempfile.mkstemp(prefix=f".{base.name}.", suffix=".part", dir=base.parent)
    part = Path(name)
    converted = part.with_suffix(".converted")
    try:
        with os.fdopen(fd, "wb") as out:
            digest = _download(image, out)
        _verify_checksum(image, digest)
        final = _checked_format(image, part, force_raw, converted)
        os.replace(final, base)
    finally:
        part.unlink(missing_ok=True)
        converted.unlink(missing_ok=True)
    LOG.info("image %s: fetched from %s into %s", image.id, shown(image.location), base)


def _download(image: ImageSpec, out: BinaryIO) -> str:
    """Stream the data into ``out``, leaving holes where it is zeros (a raw image is
    mostly empty disk); its SHA-256 in hex."""
    with _open(image) as source:
        try:
            return copy_sparse(source, out)[1]
        except (OSError, http.client.HTTPException) as exc:  # the connection dropped
            raise _unreadable(image, exc) from exc


@contextlib.contextmanager
def _open(image: ImageSpec) -> Iterator[BinaryIO]:
    location = image.location
    try:
        if _is_url(location):
            with urllib.request.urlopen(location, timeout=URL_TIMEOUT_S) as response:  # noqa: S310
                yield response
        elif os.path.isabs(location):
            with open(location, "rb") as handle:
                yield handle
        else:
            raise ImageFetchError(
                image=image.id, reason=f"location {location!r} is neither a path nor a URL"
            )
    except (OSError, http.client.HTTPException) as exc:  # (URLError is an OSError)
        raise _unreadable(image, exc) from exc


def _unreadable(image: ImageSpec, exc: OSError | http.client.HTTPException) -> ImageFetchError:
    """The error for data that could not be read: ``ImageEndpointUnreachable`` when an
    endpoint did not answer (refused, reset, timed out, a malformed answer) or answered
    5xx, which another round may not meet; not a refusal (403, 404), a local file, nor a
    failed write of the local copy."""
    if isinstance(exc, urllib.error.HTTPError):
        exc.close()  # (it holds the response's socket)
        detail = f"HTTP {exc.code} {exc.reason}"
    else:
        detail = str(exc) or repr(exc)
    transient = _is_url(image.location) and sender_failed(exc)
    error = ImageEndpointUnreachable if transient else ImageFetchError
    return error(image=image.id, reason=f"cannot read {shown(image.location)}: {detail}")


def _is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


def _verify_checksum(image: ImageSpec, actual: str) -> None:
    if image.checksum and image.checksum.lower() != actual:
        raise ImageChecksumError(
            image=image.id,
            expected=image.checksum,
            location=shown(image.location),
            actual=actual,
        )


def _checked_format(image: ImageSpec, part: Path, force_raw: bool, converted: Path) -> Path:
    """The file to cache: ``part`` itself, or its raw conversion."""
    data = qemu_img.info(part)
    detected, backing = data.get("format"), data.get("backing-filename")
    if backing:
        raise ImageFetchError(image=image.id, reason=f"its {detected} data has a backing file")
    if detected != image.disk_format:
        raise ImageFetchError(
            image=image.id,
            reason=f"declared {image.disk_format} but its data is {detected}",
        )
    if detected == "raw" or not force_raw:
        return part
    qemu_img.convert(part, converted, "raw")
    LOG.info("image %s: converted from %s to raw (force_raw_images)", image.id, detected)
    return converted
