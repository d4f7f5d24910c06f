"""The command lines of novaq's roles, one function each, and a process started on a
machine (in its namespace, under its own hostname, in its own directory).

The roles are started as the Procfile starts them (``celery -A tasks worker|beat``); when
``novaq compute --host NAME`` and ``novaq controller`` exist, each function below becomes
that one command.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.multihost.netns import Machine, kill_namespace

ROOT = Path(__file__).resolve().parents[2]
_CELERY = [sys.executable, "-m", "celery", "-A", "tasks"]


def compute_argv(host: str) -> list[str]:
    """One compute worker for ``host`` (NOVAQ_HOST is set to it too)."""
    return [
        *_CELERY,
        "worker",
        "-Q",
        f"compute.{host}",
        "-n",
        f"compute@{host}",
        "--pool",
        "threads",
        "-E",
        "-l",
        "INFO",
    ]


def scheduler_argv() -> list[str]:
    """A scheduler worker; ``%h`` is its machine's hostname."""
    return [
        *_CELERY,
        "worker",
        "-Q",
        "scheduler,maintenance",
        "-n",
        "scheduler@%h",
        "-E",
        "-l",
        "INFO",
    ]


def beat_argv() -> list[str]:
    return [*_CELERY, "beat", "-l", "INFO"]


def _die_with_parent() -> None:
    """The process gets SIGKILL when the test process dies (no stray worker of an
    interrupted run consumes the next run's queues)."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


@dataclass
class Process:
    """A role running on a machine, its output in ``log``."""

    role: str
    machine: Machine
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout_s: float = 20) -> None:
        """SIGTERM (a clean stop), SIGKILL if it is still there after ``timeout_s``."""
        if not self.alive():
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def start(
    role: str, machine: Machine, hostname: str, argv: list[str], env: dict[str, str], home: Path
) -> Process:
    """``argv`` in ``machine``'s namespace and a UTS namespace of its own named
    ``hostname``, with only ``env`` (plus PATH and PYTHONPATH) and ``home`` as its
    working directory; output appended to ``home/<role>.log``."""
    home.mkdir(parents=True, exist_ok=True)
    wrapped = [
        "ip",
        "netns",
        "exec",
        machine.namespace,
        "unshare",
        "--uts",
        "--",
        "sh",
        "-c",
        'hostname "$0" && exec "$@"',
        hostname,
        *argv,
    ]
    full_env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")}
    full_env.update(env, PYTHONPATH=str(ROOT), HOME=str(home))
    log = home / f"{role}.log"
    with log.open("ab") as handle:
        proc = subprocess.Popen(
            wrapped,
            env=full_env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=home,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    return Process(role, machine, proc, log)


def power_off(machine: Machine) -> None:
    """Every process of ``machine`` SIGKILLed at once (the machine dies)."""
    kill_namespace(machine.namespace)
