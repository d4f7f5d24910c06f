"""The tier's processes: a private Redis, a real ``novaq up`` cluster, extra compute workers
started by hand (a host whose PATH lacks qemu-img, a host whose libvirtd goes away) and the
unix-socket relay that lets a test take libvirtd away from one host only."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.workers import ROOT, Worker

#: A child of the tier (broker, ``novaq up``, a compute worker): the integration tier's.
Process = Worker


def redis_server(state: Path, port: int, password: str) -> Process:
    """A throw-away broker (no persistence) on ``port``."""
    directory = state / "redis"
    directory.mkdir(parents=True, exist_ok=True)
    conf = directory / "redis.conf"
    conf.write_text(f"requirepass {password}\n")
    conf.chmod(0o600)
    argv = [
        "redis-server", str(conf), "--port", str(port), "--bind", "127.0.0.1",
        "--save", "", "--appendonly", "no", "--dir", str(directory),
    ]  # fmt: skip
    return Process("redis", argv, dict(os.environ), state / "redis.log").start()


def novaq_up(state: Path, env: dict[str, str]) -> Process:
    """``novaq up``: scheduler, one compute worker per ``[[hosts]]`` table, beat, Flower."""
    argv = [sys.executable, "-m", "novaq.cli", "up"]
    return Process("novaq-up", argv, {**env, "PYTHONPATH": str(ROOT)}, state / "up.log").start()


def compute_worker(state: Path, host: str, env: dict[str, str]) -> Process:
    """One compute worker as ``novaq up`` would run it (``novaq.launcher.plan``), with ``env``
    (its own NOVAQ_CONFIG, PATH…) on top of the cluster's."""
    from novaq.launcher.plan import plan_processes
    from novaq.settings import load_settings

    specs = plan_processes(load_settings(), [host], env["NOVAQ_BROKER_URL"], env)
    spec = next(s for s in specs if s.name == f"compute-{host}")
    child_env = {**spec.env, **env, "NOVAQ_HOST": host, "PYTHONPATH": str(ROOT)}
    return Process(spec.name, spec.argv, child_env, state / f"{spec.name}.log").start()


def path_without(program: str, directory: Path) -> str:
    """A PATH of one directory holding links to every program of the usual ones but
    ``program``: a worker run with it finds everything else."""
    directory.mkdir(parents=True, exist_ok=True)
    for bindir in ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"):
        for entry in Path(bindir).glob("*") if Path(bindir).is_dir() else ():
            link = directory / entry.name
            if entry.name != program and not link.exists() and not link.is_symlink():
                link.symlink_to(entry)
    return str(directory)


@dataclass
class SocketRelay:
    """A unix socket relaying every connection to libvirtd's socket. A host whose
    ``connection_uri`` names the relay (``qemu:///system?socket=<path>``) talks to the real
    libvirtd until :meth:`cut`, after which libvirtd is down as far as that host can tell."""

    path: Path
    target: str = "/var/run/libvirt/libvirt-sock"
    _listener: socket.socket | None = None
    _open: list[socket.socket] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> SocketRelay:
        self.path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.path))
        self._listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def cut(self) -> None:
        """Stop listening, remove the socket and close every relayed connection."""
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
            self._listener = None
        self.path.unlink(missing_ok=True)
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._open.clear()

    def _accept(self) -> None:
        listener = self._listener
        while listener is not None:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)
