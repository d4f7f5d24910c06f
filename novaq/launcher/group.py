"""A supervised group of processes: what ``novaq up``, ``novaq controller`` and ``novaq
compute`` share. A launcher plans its children (``specs.py``), starts them, supervises
them in the foreground (:meth:`ProcessGroup.run_forever`: a child that dies is restarted
with backoff and one line saying so, and only a process that keeps dying stops the group;
``novaq/launcher/supervisor.py``) and stops them. Before that, :meth:`ProcessGroup.wait_ready`
fails fast instead: a child that dies before it first answers a ping is a broken setting
or install, which a restart would only repeat, and the operator wants its log tail at
once. What differs between the launchers (an embedded broker, the cluster's TOML, the
database upgrade, the checks of a role) is in :meth:`ProcessGroup.prepare` of each.

NOTE: children are ``subprocess.Popen``'d (``novaq/launcher/children.py``), each in a
session of its own; honcho supplies only the look of the output (its ``Printer`` and
colours). ``honcho.manager.Manager`` does not fit: ``loop()`` blocks and installs
SIGINT/SIGTERM handlers (so it cannot run in a background thread, and ``start()`` must not
block), it forks a ``multiprocessing`` helper per child and runs each command through a
shell, it allows 5 s (``KILL_WAIT``) before SIGKILL where a warm Celery shutdown needs
longer, and it cannot tee output to log files or keep it off the console for ``novaq demo``.
With a session per child, a Ctrl-C in the terminal (or systemd's SIGTERM) reaches only the
launcher, which then sends one SIGTERM (Celery's warm shutdown) to each child's main
process, and SIGKILLs the whole process group (prefork pool included) of any child still
alive after the grace period.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Self, TextIO

from honcho.colour import get_colours
from honcho.printer import Message, Printer

from novaq.launcher.children import Child
from novaq.launcher.flower_guard import (
    flower_command,
    flower_url,
    new_operator_credential,
    operator_credential,
    with_free_flower_port,
)
from novaq.launcher.flower_probe import workers_heard
from novaq.launcher.private_files import make_private_dir, tighten_tree
from novaq.launcher.readiness import Readiness
from novaq.launcher.specs import FLOWER, ProcessSpec
from novaq.launcher.supervisor import Member, RestartPolicy, Supervisor
from novaq.settings import Settings

LOG = logging.getLogger(__name__)

SHUTDOWN_TIMEOUT_S = 15.0
READY_TIMEOUT_S = 60.0
_SYSTEM = "system"
#: A child's line that is a log record of level ERROR or CRITICAL (Celery's format,
#: ``[<time>: ERROR/MainProcess] ...``): shown on the console even when the children's
#: output goes to their logs only.
_SEVERE = re.compile(r"^\[[^\]]*: (ERROR|CRITICAL)/")


# -- the group -------------------------------------------------------------------------------
class ProcessGroup:
    """Supervised children: a context manager, ``start()`` (non-blocking), ``wait_ready()``,
    ``run_forever()`` (foreground, restarting what dies, until Ctrl-C, SIGTERM or a
    process that keeps dying; ``restart_policy`` says how) and ``stop()``.

    The children's output goes to ``<state_dir>/logs/<name>.log``; unless ``quiet``,
    ``output`` (default stdout) gets the launcher's own lines (started, died, restarted,
    ready, stopped), the children's ERROR and CRITICAL log lines, and, with ``follow``,
    every line of the children (their banners included), prefixed with the process
    name. A subclass says what runs (:meth:`plan`), on which broker (:attr:`broker_url`),
    what is done before (:meth:`prepare`), whether Flower is among the children
    (:attr:`runs_flower`) and what the group is called in its lines (:attr:`label`).
    """

    #: The group's name in its lines ("cluster ready: ...").
    label = "cluster"
    #: The command that runs it, in the line a restarted child's log gets.
    launcher = "novaq up"
    #: Whether the plan runs Flower: its address is checked and its port moved if taken
    #: before anything starts, and its operator credential generated.
    runs_flower = True

    def __init__(
        self,
        settings: Settings,
        *,
        quiet: bool = False,
        output: TextIO | None = None,
        env: Mapping[str, str] | None = None,
        shutdown_timeout_s: float = SHUTDOWN_TIMEOUT_S,
        restart_policy: RestartPolicy | None = None,
        follow: bool = False,
    ) -> None:
        self.settings = settings
        self.follow = follow
        self._credentials: Path | None = None
        self.restart_policy = restart_policy or RestartPolicy()
        self.state_dir = settings.state_dir.resolve()
        self.log_dir = self.state_dir / "logs"
        self.shutdown_timeout_s = shutdown_timeout_s
        self._env = dict(os.environ if env is None else env)
        self._printer = None if quiet else Printer(output or sys.stdout, width=len(_SYSTEM))
        self._print_lock = threading.RLock()  # RLock: signal handlers print too
        self._colours: Iterator[int] = get_colours()
        self._children: list[Child] = []
        self._started = False

    # -- what a subclass says ----------------------------------------------------------------
    @property
    def broker_url(self) -> str:
        """The broker the children use (and the readiness probe pings through)."""
        raise NotImplementedError

    def plan(self, broker_url: str) -> list[ProcessSpec]:
        """The processes to run."""
        raise NotImplementedError

    def prepare(self) -> None:
        """What must be done (or checked) before the children start; raising stops the
        start and whatever it started."""

    def announce_prepared(self) -> None:
        """Lines about what :meth:`prepare` started (said once the output's width is
        known)."""

    # -- properties ------------------------------------------------------------------------
    @property
    def flower_url(self) -> str:
        return flower_url(self.settings)

    @property
    def processes(self) -> list[ProcessSpec]:
        return [child.spec for child in self._children]

    def log_path(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> Self:
        """Prepare, launch the children; do not wait."""
        if self._started:
            return self
        if self.runs_flower:
            flower_command(self.settings)  # refuse an open Flower before starting anything
            self._move_flower_if_its_port_is_taken()
        self._started = True
        try:
            make_private_dir(self.state_dir)
            make_private_dir(self.log_dir)
            if self.runs_flower:
                self._credentials = new_operator_credential(self.settings)
            self.prepare()
            # What an older run left readable, and what the preparation wrote in this
            # process (the demo image); the children run under PRIVATE_UMASK.
            tighten_tree(self.state_dir)
            self._launch(self.plan(self.broker_url))
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)
        return self

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Return once the group is ready (``novaq/launcher/readiness.py``: the workers
        answer a ping, Flower hears them, the servers accept connections); a child that
        exits meanwhile raises ``ServiceUnavailable`` with its log's tail (no restart
        here: see the module's docstring)."""
        self._readiness().wait(timeout_s)

    def run_forever(self) -> int:
        """Run in the foreground, restarting whatever dies, until Ctrl-C, SIGTERM or SIGHUP,
        or until one process dies too often (``restart_policy``); then stop everything.

        Returns 0 after a requested stop, else the status of the process that kept dying
        (its exit status, 128+N for signal N, 1 if it exited with 0).
        """
        self.start()
        requested = threading.Event()
        previous = _install_stop_handlers(requested, self._system)
        supervisor = Supervisor(self._warn, self.restart_policy)
        done = threading.Event()
        announcer = threading.Thread(
            target=self._announce_ready, args=(done,), name="novaq-ready", daemon=True
        )
        announcer.start()
        status = 0
        try:
            while not requested.wait(0.2):
                stop = supervisor.poll(self._members())
                if stop is not None:
                    status = stop
                    break
        finally:
            done.set()
            announcer.join(timeout=5.0)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.stop()
        return status

    def ready_line(self) -> str:
        """The line that ends the start-up output: what runs, where Flower is and where
        its credential is kept (never the credential itself), where the logs are."""
        names = ", ".join(child.name for child in self._children)
        flower = ""
        if self.runs_flower:
            login = (
                f"user:password in {self._credentials}"
                if self._credentials is not None
                else "user:password of [flower] basic_auth"
            )
            flower = f"Flower {self.flower_url} (log in with the {login}); "
        return f"{self.label} ready: {names}; {flower}logs in {self.log_dir}; Ctrl-C stops it"

    def stop(self) -> None:
        """SIGTERM every child, SIGKILL those left after the grace period.

        Idempotent.
        """
        atexit.unregister(self.stop)
        self._started = False
        children, self._children = self._children, []
        self._shut_down(children)
        for child in children:
            child.close()
        if children:
            self._system("all processes stopped")

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals -------------------------------------------------------------------------
    def _members(self) -> list[Member]:
        """What the supervisor watches."""
        return list(self._children)

    def _announce_ready(self, done: threading.Event) -> None:
        """Print :meth:`ready_line` once the group is ready; give up silently when
        ``done`` is set first (the group stopped)."""
        readiness = self._readiness()
        app = readiness.probe_app()
        try:
            while not done.is_set():
                if readiness.ready_now(app):
                    if not done.is_set():
                        self._system(self.ready_line())
                    return
                done.wait(0.5)
        except Exception:  # noqa: BLE001 - the announcement must never stop the group
            LOG.exception("could not tell whether the %s is ready", self.label)
        finally:
            app.close()

    def _readiness(self) -> Readiness:
        heard = None
        if any(child.name == FLOWER for child in self._children):
            credential = operator_credential(self.settings)
            url = self.flower_url

            def heard() -> set[str]:
                return workers_heard(url, credential)

        return Readiness(f"novaq {self.label}", self.broker_url, lambda: self._children, heard)

    def _move_flower_if_its_port_is_taken(self) -> None:
        self.settings, taken = with_free_flower_port(self.settings)
        if taken is not None:
            self._system(
                f"Flower's port {taken} is taken; Flower listens on {self.settings.flower.port}"
            )

    def _flower_respec(self, spec: ProcessSpec) -> ProcessSpec:
        """Flower's spec for a restart: on another port if its own was taken meanwhile."""
        self._move_flower_if_its_port_is_taken()
        port = f"--port={self.settings.flower.port}"
        argv = [port if arg.startswith("--port=") else arg for arg in spec.argv]
        return dataclasses.replace(spec, argv=argv)

    def _child_line(self, name: str, colour: int | None, line: str) -> None:
        """A child's line for the console: every line with ``follow``, else its errors."""
        if self.follow or _SEVERE.match(line):
            self._emit(name, colour, line)

    def _launch(self, specs: list[ProcessSpec]) -> None:
        if self._printer is not None:
            self._printer.width = max([len(_SYSTEM), *(len(s.name) for s in specs)])
        self.announce_prepared()
        for spec in specs:
            respec = self._flower_respec if spec.name == FLOWER else None
            colour = next(self._colours)
            child = Child(spec, self.log_dir, self._child_line, colour, respec, self.launcher)
            self._children.append(child)
            self._system(f"{spec.name} started (pid={child.proc.pid})")

    def _shut_down(self, children: list[Child]) -> None:
        for child in children:
            if child.alive():
                self._system(f"sending SIGTERM to {child.name} (pid {child.proc.pid})")
                child.terminate()
        deadline = time.monotonic() + self.shutdown_timeout_s
        for child in children:
            if not child.wait(deadline - time.monotonic()):
                self._system(f"sending SIGKILL to {child.name} (pid {child.proc.pid})")
                child.kill()
                child.wait(5.0)

    def _emit(self, name: str, colour: int | None, line: str) -> None:
        if self._printer is None:
            return
        message = Message("line", line, datetime.datetime.now(), name, colour)
        with self._print_lock:
            self._printer.write(message)

    def _system(self, text: str) -> None:
        LOG.debug("%s", text)
        self._emit(_SYSTEM, None, text)

    def _warn(self, text: str) -> None:
        """A supervisor's line: on the console, or logged as a warning when the group is
        quiet (``novaq demo --keep``), so that a death is always seen."""
        if self._printer is None:
            LOG.warning("%s", text)
        else:
            self._system(text)


def _install_stop_handlers(
    requested: threading.Event, report: Callable[[str], None]
) -> dict[int, Any]:
    """Turn SIGINT, SIGTERM and SIGHUP into ``requested``; return the previous handlers."""

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        report(f"{signal.Signals(signum).name} received")
        requested.set()

    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous  # only the main thread may set handlers; the caller calls stop()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, _on_signal)
    return previous
