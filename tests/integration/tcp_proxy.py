"""A TCP proxy on loopback that a test or the soak can make refuse, to give a server's
clients an outage without touching the shared server behind it.

``refuse()`` closes the listening socket (new connections get ``ECONNREFUSED``, as from a
PostgreSQL that is down) and cuts every open connection (a client in a query sees the
server close it); ``accept()`` listens again on the same port. One thread accepts, two
threads pump each connection; they are daemons, so a crashed test leaves nothing behind.

    proxy = TcpProxy("127.0.0.1", 5432).start()
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/mydb"
    proxy.refuse(); ...; proxy.accept()
    proxy.close()
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

_CHUNK = 65536


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.port = port
        self.connections = 0  # accepted so far, for a test to see traffic went through
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def refusing(self) -> bool:
        return self._listener is None

    def start(self) -> TcpProxy:
        self.accept()
        return self

    def accept(self, timeout_s: float = 10) -> None:
        """Listen (again) on ``port``; a no-op if already listening."""
        if self._listener is not None:
            return
        listener = _bind(self.port, timeout_s)
        self.port = listener.getsockname()[1]
        self._stopping.clear()
        self._listener = listener
        self._thread = threading.Thread(
            target=self._accept_loop, args=(listener,), name=f"proxy-{self.port}", daemon=True
        )
        self._thread.start()

    def refuse(self) -> None:
        """Stop listening and cut every open connection (in both directions)."""
        listener, self._listener = self._listener, None
        self._stopping.set()
        if listener is not None:
            listener.close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        with self._lock:
            doomed, self._open = self._open, set()
        for sock in doomed:
            _cut(sock)

    def close(self) -> None:
        self.refuse()

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return  # closed by refuse()
            self._serve(client)

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            _cut(client)  # the server behind is down too: the client sees it closed
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with self._lock:
            if self._stopping.is_set():
                _cut(client)
                _cut(upstream)
                return
            self._open.update((client, upstream))
            self.connections += 1
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        # One side finished: end both, as a dying server or client would.
        with self._lock:
            self._open.difference_update((src, dst))
        _cut(src)
        _cut(dst)


def _bind(port: int, timeout_s: float) -> socket.socket:
    """Bind the port, retrying while the kernel still holds it from the last listener."""
    deadline = time.monotonic() + timeout_s
    while True:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", port))
        except OSError:
            listener.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        listener.listen(128)
        listener.settimeout(0.2)  # so the accept loop sees refuse() promptly
        return listener


def _cut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


def free_port() -> int:
    """A loopback port nothing listens on now (for a proxy that starts refusing)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
