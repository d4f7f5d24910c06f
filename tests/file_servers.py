"""Servers the transfer tests fetch from: a throw-away HTTP server with a handler of the
test's own (``serving``), and novaq's signed file server starting only a while after
the block begins (``listening_late``: an endpoint starting or restarting)."""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator
from typing import Any

from tests.tcp_proxy import free_port
from virt.transfer.file_server import Resolver, SignedFileServer, bind
from virt.transfer.signing import TransferKey


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[Any]:
    """An HTTP server on a free loopback port answering with ``handler``, in a thread."""
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def listening_late(key: TransferKey, resolver: Resolver, delay_s: float = 0.3) -> Iterator[str]:
    """The base URL of a signed file server that starts listening ``delay_s`` after the
    block begins: connections are refused until then."""
    port = free_port()
    started: list[SignedFileServer] = []

    def start() -> None:
        time.sleep(delay_s)
        started.append(bind("127.0.0.1", port, key, resolver).serve_in_thread())

    late = threading.Thread(target=start)
    late.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        late.join()
        for server in started:
            server.close()
