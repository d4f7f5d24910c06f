"""A TCP proxy a test puts in front of a server (PostgreSQL) to make it fail on purpose:
refuse new connections, cut the open ones, or accept and hang up at once, then come
back, all without touching the real server that other tests share.

Threads only (an accept loop, two pumps per connection); it lives in the test process
and dies with it. ``with TcpProxy(port=5432) as proxy:`` gives ``proxy.port``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

_CHUNK = 65536


def free_port() -> int:
    """A loopback port nothing listens on now: for a server to bind, or a "connection
    refused"."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def reachable(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", port: int = 0) -> None:
        self.target = (target_host, target_port)
        #: 0: any free port, known once started; or a port chosen before (``free_port``),
        #: so a URL can name it while nothing listens there yet.
        self.port = port
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._hang_up = False
        self._closed = False
        #: Connections accepted so far (a test can tell that clients came back).
        self.accepted = 0

    # -- what a test does ----------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._listen()
        return self

    def refuse(self) -> None:
        """New connections are refused (nothing listens on the port) and the open ones
        are cut, as a database that went down."""
        listener, self._listener = self._listener, None
        if listener is not None:
            # shutdown wakes the thread blocked in accept() (close alone does not, on Linux)
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.cut()

    def cut(self) -> None:
        """Close every open connection (both sides), as a server that went away mid-way."""
        with self._lock:
            sockets, self._open = self._open, set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def hang_up(self, on: bool = True) -> None:
        """Accept new connections and close them at once (a server that closes
        connections), or stop doing so."""
        self._hang_up = on
        if on:
            self.cut()

    def restore(self) -> None:
        """Back to forwarding, on the same port."""
        self._hang_up = False
        if self._listener is None:
            self._listen()

    #: Listen again after ``refuse`` (the soak's name for ``restore``).
    accept = restore

    @property
    def refusing(self) -> bool:
        return self._listener is None

    def close(self) -> None:
        self._closed = True
        self.refuse()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the machinery -------------------------------------------------------------------

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _bind(listener, self.port)
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, _ = listener.accept()
            except OSError:  # the listener was closed: refuse() or close()
                return
            self.accepted += 1
            if self._hang_up:
                client.close()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        # One side ended: end the other, so both of the client's halves see it.
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._open.discard(src)
            self._open.discard(dst)
        src.close()


def _bind(listener: socket.socket, port: int, timeout_s: float = 10) -> None:
    """Bind ``port`` again after a refuse: the port may linger a moment in the kernel."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            listener.bind(("127.0.0.1", port))
            return
        except OSError:
            if port == 0 or time.monotonic() > deadline:
                raise
            time.sleep(0.1)
