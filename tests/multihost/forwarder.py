"""The controller machine's services, on its address: TCP forwarders (PostgreSQL, Redis,
RabbitMQ) and the image endpoint, each listening inside the controller's namespace and
served from the test process in the root namespace.

The servers themselves run once on this box's loopback (127.0.0.1 of the root namespace),
shared with other tests; a forwarder's listening socket is made inside the controller's
namespace (``netns.inside``) and each connection it accepts there is carried to the
loopback port by ``tests/tcp_proxy.TcpProxy``'s pumps. So a compute machine reaches the
database at ``<controller address>:5432`` over the bridge, and the server sees a loopback
client (which RabbitMQ's ``guest`` user needs).
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import socket
import threading
from pathlib import Path

from tests.multihost.netns import inside
from tests.tcp_proxy import TcpProxy


def _listener(namespace: str, address: str, port: int) -> socket.socket:
    with inside(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(128)
    return sock


class Forwarder(TcpProxy):
    """``<address>:<port>`` in ``namespace`` forwarded to ``127.0.0.1:<target_port>``."""

    def __init__(self, namespace: str, address: str, port: int, target_port: int) -> None:
        super().__init__(target_port, port=port)
        self.namespace, self.address = namespace, address

    def _listen(self) -> None:
        listener = _listener(self.namespace, self.address, self.port)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()


class _Files(http.server.SimpleHTTPRequestHandler):
    """Files of one directory, each GET counted on the server, nothing logged."""

    server: _CountingServer

    def do_GET(self) -> None:
        self.server.gets += 1
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
        pass


class _CountingServer(http.server.ThreadingHTTPServer):
    gets = 0


class ImageEndpoint:
    """The image store's files over HTTP at ``http://<address>:<port>/<image id>``:
    what a compute machine downloads an image from (``virt/libvirt/image_fetch.py``
    reads ``http://`` locations), in place of the controller's image endpoint."""

    def __init__(self, namespace: str, address: str, port: int, store: Path) -> None:
        handler = functools.partial(_Files, directory=str(store))
        self.server = _CountingServer((address, port), handler, bind_and_activate=False)
        self.server.socket.close()
        self.server.socket = _listener(namespace, address, port)
        self.url = f"http://{address}:{port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def downloads(self) -> int:
        """GET requests served so far."""
        return self.server.gets

    def start(self) -> ImageEndpoint:
        self._thread.start()
        return self

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.server.shutdown()
            self.server.server_close()
