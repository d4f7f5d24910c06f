"""Fetching one file from a signed URL into a local file, sparse and verified.

The data is written to a temporary name next to the target, with holes where it is zeros
(a raw disk is mostly empty), its length and SHA-256 compared with what the sender
announced (``Content-Length``, ``X-Content-SHA256``), and only then renamed over the
target; any failure removes the temporary file, so a half-fetched file is never taken for
a whole one. A URL is shown in errors and logs without its query (the signature).

A sender that does not answer, drops the connection or answers 5xx (a worker restarting
its endpoint, a network blip) is tried again, ``attempts`` times in all with backoff; a
refusal (403), data that fails its check, or a local write that fails (a full disk) is
not: another try would meet it again.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from novaq.exceptions import HypervisorError
from virt.transfer.file_server import DIGEST_HEADER

LOG = logging.getLogger(__name__)

CHUNK_BYTES: Final = 1024 * 1024
TIMEOUT_S: Final = 60
#: The first wait before another try, doubled each time up to ``RETRY_MAX_S``.
RETRY_FIRST_S: Final = 1.0
RETRY_MAX_S: Final = 4.0


class TransferError(HypervisorError):
    msg_fmt = "Cannot fetch %(url)s: %(reason)s"


class TransferUnreachable(TransferError):
    """The sender did not answer, dropped the connection or answered 5xx: what another
    try may not meet."""


class TransferChecksumError(TransferError):
    msg_fmt = "The data of %(url)s failed its check: %(reason)s"


class LocalWriteError(OSError):
    """Writing the local copy failed (a full disk, an I/O error): the receiver's own
    trouble, which no other try at the sender would mend."""


def shown(url: str) -> str:
    """``url`` without its query: what may be logged."""
    return urllib.parse.urlsplit(url)._replace(query="", fragment="").geturl()


def copy_sparse(source: BinaryIO, out: BinaryIO) -> tuple[int, str]:
    """Copy ``source`` to ``out`` leaving holes for zero chunks; (length, SHA-256 hex).
    An error of ``out`` is a ``LocalWriteError``; one of ``source`` is raised as it is."""
    digest, zeros, length = hashlib.sha256(), bytes(CHUNK_BYTES), 0
    while chunk := source.read(CHUNK_BYTES):
        digest.update(chunk)
        length += len(chunk)
        with _writing():
            if chunk == zeros[: len(chunk)]:
                out.seek(len(chunk), os.SEEK_CUR)
            else:
                out.write(chunk)
    with _writing():
        out.truncate(length)
    return length, digest.hexdigest()


def sender_failed(exc: OSError | http.client.HTTPException) -> bool:
    """Whether ``exc``, met reading from a sender, is one another try may not meet: no
    answer, a dropped connection, a malformed answer or a 5xx; not a refusal (4xx) nor a
    failed write of the local copy (``LocalWriteError``)."""
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code >= 500
    return not isinstance(exc, LocalWriteError)


@contextlib.contextmanager
def _writing() -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise LocalWriteError(exc.errno, f"writing the local copy: {exc.strerror or exc}") from exc


def fetch_to_file(url: str, target: Path, timeout_s: float = TIMEOUT_S, attempts: int = 1) -> bool:
    """Make ``target`` hold the verified data at ``url``; False (nothing written) when the
    sender has no such file (404). A ``TransferUnreachable`` is tried again, ``attempts``
    tries in all."""
    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=RETRY_FIRST_S, max=RETRY_MAX_S),
        retry=retry_if_exception_type(TransferUnreachable),
        before_sleep=lambda state: LOG.warning(
            "%s; trying again", state.outcome.exception() if state.outcome else ""
        ),
        reraise=True,
    )
    return bool(retrying(_fetch_once, url, target, timeout_s))


def _fetch_once(url: str, target: Path, timeout_s: float) -> bool:
    part = target.with_name(f".{target.name}.part")
    part.unlink(missing_ok=True)
    try:
        with _opened(url, timeout_s) as response:
            if response is None:
                return False
            with _writing():
                out = part.open("wb")
            with out:
                length, digest = copy_sparse(response, out)
                with _writing():
                    out.flush()
                    os.fsync(out.fileno())
            _check(url, response, length, digest)
        with _writing():
            os.replace(part, target)
    except (OSError, http.client.HTTPException) as exc:  # (URLError is an OSError)
        error = TransferUnreachable if sender_failed(exc) else TransferError
        raise error(url=shown(url), reason=str(exc) or type(exc).__name__) from exc
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
            error = TransferUnreachable if sender_failed(exc) else TransferError
            raise error(url=shown(url), reason=f"HTTP {exc.code} {exc.reason}") from exc
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
