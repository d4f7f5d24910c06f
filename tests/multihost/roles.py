"""The command lines of novaq's roles, one function each, and a process started on a
machine (in its namespace, under its own hostname, in its own directory).

Each is a ``tests.integration.workers.Worker`` (its own session, SIGKILLed if the test
process dies, its output in a log) named after its machine. The roles are started as the
Procfile starts them (``celery -A tasks worker|beat``); when
``novaq compute --host NAME`` and ``novaq controller`` exist, each function below becomes
that one command.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.integration.workers import Worker
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


def start(
    machine: Machine, hostname: str, argv: list[str], env: dict[str, str], log: Path
) -> Worker:
    """``argv`` in ``machine``'s namespace and a UTS namespace of its own named
    ``hostname``, with only ``env`` (plus PATH, PYTHONPATH and HOME, the directory of
    ``log``); output appended to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
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
    full_env.update(env, PYTHONPATH=str(ROOT), HOME=str(log.parent))
    return Worker(machine.name, wrapped, full_env, log).start()


def power_off(machine: Machine) -> None:
    """Every process of ``machine`` SIGKILLed at once (the machine dies)."""
    kill_namespace(machine.namespace)
