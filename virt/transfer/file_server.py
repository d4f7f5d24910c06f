"""A read-only HTTP file server for signed requests (``virt.transfer.signing``).

``GET <path>?expires=…&signature=…`` answers 403 unless the signature is valid and
unexpired, 404 unless ``resolve(path)`` names a regular file, else the file with its
``Content-Length`` and its SHA-256 in ``X-Content-SHA256`` (computed before the body is
sent, and kept while the file's size and modification time stay the same), which the
receiving side checks. ``resolve`` is the whole of what is served: it gets the raw path
and returns a file only for the names it knows, so no request reaches another file.
Anything but GET is 501 (``http.server``'s answer). Runs on the standard library's
``ThreadingHTTPServer``: one thread per request, daemon threads, in a thread of its own
(``serve_in_thread``) or in the foreground (``serve_forever``).
"""

from __future__ import annotations

import hashlib
import http.server
import logging
import shutil
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from virt.transfer.signing import TransferKey, is_valid

LOG = logging.getLogger(__name__)

DIGEST_HEADER: Final = "X-Content-SHA256"
CHUNK_BYTES: Final = 1024 * 1024
#: Digests kept (one per file served lately); past it the oldest half is forgotten.
DIGESTS_KEPT: Final = 256

Resolver = Callable[[str], Path | None]


class SignedFileServer(http.server.ThreadingHTTPServer):
    """Serves ``resolve(path)`` to requests signed with ``key``."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], key: TransferKey, resolve: Resolver) -> None:
        self.key, self.resolve = key, resolve
        self._digests: dict[tuple[str, int, int], str] = {}
        self._digests_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        """``http://<address>:<port>`` as bound (the port chosen when 0 was asked)."""
        host, port = self.server_address[:2]
        shown = host.decode() if isinstance(host, bytes) else host
        return f"http://[{shown}]:{port}" if ":" in shown else f"http://{shown}:{port}"

    def serve_in_thread(self, name: str = "novaq-transfer") -> SignedFileServer:
        self._thread = threading.Thread(target=self.serve_forever, name=name, daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving (from another thread than the one serving) and free the port."""
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()

    def digest_of(self, path: Path) -> tuple[int, str]:
        """The file's size and SHA-256 (hex), kept while its size and mtime stay."""
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        with self._digests_lock:
            known = self._digests.get(key)
        if known is None:
            known = _sha256(path)
            with self._digests_lock:
                if len(self._digests) >= DIGESTS_KEPT:
                    for old in list(self._digests)[: DIGESTS_KEPT // 2]:
                        del self._digests[old]
                self._digests[key] = known
        return stat.st_size, known


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: SignedFileServer
    protocol_version = "HTTP/1.1"
    server_version, sys_version = "novaq-transfer", ""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        parts = urllib.parse.urlsplit(self.path)
        if not is_valid(self.server.key, "GET", parts.path, parts.query):
            self._refuse(403, "Forbidden")
            return
        target = self.server.resolve(parts.path)
        if target is None or not target.is_file():
            self._refuse(404, "Not Found")
            return
        try:
            self._send(target)
        except FileNotFoundError:  # gone between the check and the open
            self._refuse(404, "Not Found")

    def _send(self, target: Path) -> None:
        size, digest = self.server.digest_of(target)
        with target.open("rb") as source:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.send_header(DIGEST_HEADER, digest)
            self.end_headers()
            try:
                shutil.copyfileobj(source, self.wfile, CHUNK_BYTES)
            except (BrokenPipeError, ConnectionResetError):
                LOG.info("Transfer of %s cut short by the receiver", target.name)
                self.close_connection = True

    def _refuse(self, code: int, reason: str) -> None:
        body = f"{code} {reason}\n".encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        # NOTE: never a query: it holds a signature (cut wherever a request line shows).
        LOG.debug("%s: %s", self.address_string(), (format % args).split("?", 1)[0])

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        path = urllib.parse.urlsplit(self.path).path
        LOG.debug("%s %s %s -> %s", self.address_string(), self.command, path, code)


def bind(address: str, port: int, key: TransferKey, resolve: Resolver) -> SignedFileServer:
    """A server bound at ``address``:``port`` (0: any free port), not yet serving."""
    return SignedFileServer((address, port), key, resolve)
