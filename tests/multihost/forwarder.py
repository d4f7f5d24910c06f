"""The controller machine's shared services on its address: TCP forwarders (PostgreSQL,
Redis, RabbitMQ), each listening inside the controller's namespace and served from the test
process in the root namespace.

The servers themselves run once on this box's loopback (127.0.0.1 of the root namespace),
shared with other tests; a forwarder's listening socket is made inside the controller's
namespace (``netns.inside``) and each connection it accepts there is carried to the
loopback port by ``tests/tcp_proxy.TcpProxy``'s pumps. So a compute machine reaches the
database at ``<controller address>:5432`` over the bridge, and the server sees a loopback
client (which RabbitMQ's ``guest`` user needs).

A forwarder stands between the server and the machines, so the server's own TCP
keepalives (PostgreSQL's ``tcp_keepalives_*``, which novaq sets on its sessions) probe the
forwarder on loopback, which always answers, and never a machine cut off the network. The
PostgreSQL forwarder therefore probes the machines' side with the same keepalives, and a
dead side ends its pair (``TcpProxy._pump``): the server sees the connection end when it
would with the machine on the other end of its own socket.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

from tests.multihost.netns import inside
from tests.tcp_proxy import TcpProxy


@dataclass(frozen=True)
class Keepalive:
    """TCP keepalive: first probe after ``idle_s`` of silence, then every
    ``interval_s``, the connection dead after ``count`` unanswered."""

    idle_s: int
    interval_s: int
    count: int

    @classmethod
    def of_novaq_sessions(cls) -> Keepalive:
        """The keepalives novaq asks of both ends of its PostgreSQL sessions."""
        from models.db import _PG_CONNECT  # the product's own figures, not a copy

        return cls(
            int(_PG_CONNECT["keepalives_idle"]),
            int(_PG_CONNECT["keepalives_interval"]),
            int(_PG_CONNECT["keepalives_count"]),
        )


def _listener(
    namespace: str, address: str, port: int, keepalive: Keepalive | None = None
) -> socket.socket:
    with inside(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if keepalive is not None:  # Linux: an accepted socket inherits these
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, keepalive.idle_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, keepalive.interval_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, keepalive.count)
    sock.bind((address, port))
    sock.listen(128)
    return sock


class Forwarder(TcpProxy):
    """``<address>:<port>`` in ``namespace`` forwarded to ``127.0.0.1:<target_port>``;
    the machines' connections probed with ``keepalive`` if given."""

    def __init__(
        self,
        namespace: str,
        address: str,
        port: int,
        target_port: int,
        keepalive: Keepalive | None = None,
    ) -> None:
        super().__init__(target_port, port=port)
        self.namespace, self.address, self.keepalive = namespace, address, keepalive

    def _listen(self) -> None:
        listener = _listener(self.namespace, self.address, self.port, self.keepalive)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
