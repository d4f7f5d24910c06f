"""The processes a launcher (``novaq up``, ``controller``, ``compute``) runs, as its
supervisor sees them: a child (a worker, beat, Flower) whose output goes to its log file,
its tail and a sink, and the embedded broker.

Each child runs in a session of its own (see ``novaq/launcher/group.py`` for why), so
that a Ctrl-C in the terminal reaches only the launcher, and a SIGKILL of its process
group reaches its pool too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import IO

from novaq.launcher.embedded_broker import EmbeddedRedis
from novaq.launcher.plan import ProcessSpec
from novaq.launcher.private_files import PRIVATE_UMASK, open_private_append
from novaq.launcher.supervisor import describe_exit

_TAIL_LINES = 30

Sink = Callable[[str, "int | None", str], None]
#: What a child's spec becomes before a restart (Flower's: a free port again).
Respec = Callable[[ProcessSpec], ProcessSpec]


class Child:
    """A running ProcessSpec: its output goes to its log file, its tail and the sink.
    ``respec``, if given, is applied to the spec before each restart; ``launcher`` names
    the command that restarts it in the line its log gets then."""

    def __init__(
        self,
        spec: ProcessSpec,
        log_dir: Path,
        sink: Sink,
        colour: int | None,
        respec: Respec | None = None,
        launcher: str = "novaq up",
    ) -> None:
        self.spec = spec
        self._launcher = launcher
        self._respec = respec
        self.log_path = log_dir / f"{spec.name}.log"
        self._sink = sink
        self._colour = colour
        self._tail: deque[str] = deque(maxlen=_TAIL_LINES)
        self._log: IO[bytes] = os.fdopen(open_private_append(self.log_path), "ab")
        self.proc, self._reader = self._spawn()

    def _spawn(self) -> tuple[subprocess.Popen[bytes], threading.Thread]:
        # PRIVATE_UMASK: what a child creates (the database's -wal/-shm, beat's schedule)
        # is its owner's alone.
        proc = subprocess.Popen(
            self.spec.argv,
            env=self.spec.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            umask=PRIVATE_UMASK,
        )
        reader = threading.Thread(
            target=self._pump, args=(proc,), name=f"novaq-{self.name}-output", daemon=True
        )
        reader.start()
        return proc, reader

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def exit_status(self) -> int | None:
        """The main process's exit status once it has ended, else None.

        What it leaves behind in its process group (a prefork pool) is SIGKILLed first:
        the exit is seen without reaping (``waitid`` with ``WNOWAIT``), so the zombie still
        holds the group id and no other process can have been given it.
        """
        if self.proc.returncode is not None:
            return self.proc.returncode
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        try:
            ended = os.waitid(os.P_PID, self.proc.pid, flags) is not None
        except ChildProcessError:  # reaped already
            return self.proc.poll()
        if not ended:
            return None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.wait()

    def restart(self) -> None:
        """Run the spec again (after its process ended), appending to the same log."""
        self._reader.join(timeout=5.0)
        line = f"--- restarted by {self._launcher} after it {self._ended()} ---\n"
        self._log.write(line.encode())
        self._log.flush()
        if self._respec is not None:
            self.spec = self._respec(self.spec)
        self.proc, self._reader = self._spawn()

    def _ended(self) -> str:
        status = self.proc.returncode
        return "ended" if status is None else describe_exit(status)

    def tail(self) -> str:
        return "".join(self._tail).rstrip()

    def terminate(self) -> None:
        """SIGTERM to the main process only: Celery's warm shutdown ends its own pool."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to the whole process group (pool processes included)."""
        if self.alive():  # NOTE: not reaped yet, so the group id cannot have been reused
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout_s: float) -> bool:
        try:
            self.proc.wait(timeout=max(timeout_s, 0.0))
        except subprocess.TimeoutExpired:
            return False
        return True

    def close(self) -> None:
        self._reader.join(timeout=2.0)
        self._log.close()

    def _pump(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in iter(proc.stdout.readline, b""):
            self._log.write(raw)
            self._log.flush()
            line = raw.decode("utf-8", "replace")
            self._tail.append(line)
            self._sink(self.name, self._colour, line)
        proc.stdout.close()


class BrokerMember:
    """The embedded broker as the supervisor sees it (restarted on the same URL)."""

    name = "broker"

    def __init__(self, broker: EmbeddedRedis) -> None:
        self.broker = broker

    @property
    def pid(self) -> int | None:
        return self.broker.pid

    @property
    def log_path(self) -> Path:
        return self.broker.log_path

    def exit_status(self) -> int | None:
        return self.broker.exit_status()

    def restart(self) -> None:
        self.broker.restart()
