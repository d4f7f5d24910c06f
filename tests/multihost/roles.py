"""The command lines of novaq's roles, one function each, and a process started on a
machine (in its namespace, under its own hostname, in its own directory).

Each is a ``tests.integration.workers.Worker`` (its own session, SIGKILLed if the test
process dies, its output in a log) named after its machine. The roles are novaq's own
commands, as an operator runs them on each machine: ``novaq controller`` (scheduler worker,
standby-capable beat, Flower, image endpoint) and ``novaq compute --host NAME``; each with
``--follow``, so its log holds every line of its children (they are also in
``<state dir>/logs/``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.integration.workers import Worker
from tests.multihost.netns import Machine, kill_namespace

ROOT = Path(__file__).resolve().parents[2]
NOVAQ = [sys.executable, "-m", "novaq.cli"]


def controller_argv(state_dir: Path, address: str, image_port: int) -> list[str]:
    """``novaq controller``, its image endpoint on ``address:image_port``."""
    return [
        *NOVAQ,
        "controller",
        "--state-dir",
        str(state_dir),
        "--image-endpoint-address",
        address,
        "--image-endpoint-port",
        str(image_port),
        "--follow",
    ]


def compute_argv(host: str, state_dir: Path) -> list[str]:
    """``novaq compute --host host``: one compute worker, ``compute@<host>``."""
    return [*NOVAQ, "compute", "--host", host, "--state-dir", str(state_dir), "--follow"]


def db_upgrade_argv() -> list[str]:
    """``novaq db upgrade``: the schema brought up to date once, before any role starts
    (a role never migrates)."""
    return [*NOVAQ, "db", "upgrade"]


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
