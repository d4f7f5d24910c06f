"""The controller machine's shared services on its address: TCP forwarders (PostgreSQL,
Redis, RabbitMQ), each listening inside the controller's namespace and served from the test
process in the root namespace.

The servers themselves run once on this box's loopback (127.0.0.1 of the root namespace),
shared with other tests; a forwarder's listening socket is made inside the controller's
namespace (``netns.inside``) and each connection it accepts there is carried to the
loopback port by ``tests/tcp_proxy.TcpProxy``'s pumps. So a compute machine reaches the
database at ``<controller address>:5432`` over the bridge, and the server sees a loopback
client (which RabbitMQ's ``guest`` user needs).
"""

from __future__ import annotations

import socket
import threading

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
