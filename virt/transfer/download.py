"""Fetching one file from a signed URL into a local file, sparse and verified.

The data is written to a temporary name next to the target, with holes where it is zeros
(a raw disk is mostly empty), its length and SHA-256 compared with what the sender
announced (``Content-Length``, ``X-Content-SHA256``), and only then renamed over the
target; any failure removes the temporary file, so a half-fetched file is never taken for
a whole one. A URL is shown in errors and logs without its query (the signature).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from novaq.exceptions import HypervisorError
from virt.transfer.file_server import DIGEST_HEADER

CHUNK_BYTES: Final = 1024 * 1024
TIMEOUT_S: Final = 60


class TransferError(HypervisorError):
    msg_fmt = "Cannot fetch %(url)s: %(reason)s"


class TransferChecksumError(TransferError):
    msg_fmt = "The data of %(url)s failed its check: %(reason)s"


def shown(url: str) -> str:
    """``url`` without its query: what may be logged."""
    return urllib.parse.urlsplit(url)._replace(query="", fragment="").geturl()


def copy_sparse(source: BinaryIO, out: BinaryIO) -> tuple[int, str]:
    """Copy ``source`` to ``out`` leaving holes for zero chunks; (length, SHA-256 hex)."""
    digest, zeros, length = hashlib.sha256(), bytes(CHUNK_BYTES), 0
    while chunk := source.read(CHUNK_BYTES):
        digest.update(chunk)
        length += len(chunk)
        if chunk == zeros[: len(chunk)]:
            out.seek(len(chunk), os.SEEK_CUR)
        else:
            out.write(chunk)
    out.truncate(length)
    return length, digest.hexdigest()


def fetch_to_file(url: str, target: Path, timeout_s: float = TIMEOUT_S) -> bool:
    """Make ``target`` hold the verified data at ``url``; False (nothing written) when the
    sender has no such file (404)."""
    part = target.with_name(f".{target.name}.part")
    part.unlink(missing_ok=True)
    try:
        with _opened(url, timeout_s) as response:
            if response is None:
                return False
            with part.open("wb") as out:
                length, digest = copy_sparse(response, out)
                out.flush()
                os.fsync(out.fileno())
            _check(url, response, length, digest)
        os.replace(part, target)
    except (OSError, http.client.HTTPException) as exc:
        raise TransferError(url=shown(url), reason=str(exc) or type(exc).__name__) from exc
    finally:
        part.unlink(missing_ok=True)
    return True


@contextlib.contextmanager
def _opened(url: str, timeout_s: float) -> Iterator[http.client.HTTPResponse | None]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            yield response
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code != 404:
            raise TransferError(url=shown(url), reason=f"HTTP {exc.code} {exc.reason}") from exc
        yield None


def _check(url: str, response: http.client.HTTPResponse, length: int, digest: str) -> None:
    announced = response.headers.get("Content-Length")
    if announced is not None and int(announced) != length:
        reason = f"{length} bytes received, {announced} announced"
        raise TransferChecksumError(url=shown(url), reason=reason)
    expected = response.headers.get(DIGEST_HEADER)
    if expected is None:
        raise TransferChecksumError(url=shown(url), reason=f"no {DIGEST_HEADER} was sent")
    if expected.lower() != digest:
        reason = f"sha256 {digest}, the sender announced {expected}"
        raise TransferChecksumError(url=shown(url), reason=reason)
