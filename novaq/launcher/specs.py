"""The processes novaq runs, one builder each: a scheduler worker, a compute worker for one
host, celery beat, Flower, the image endpoint. ``novaq up`` (``plan.py``), ``novaq
controller`` and ``novaq compute`` (``roles.py``) compose their plans from these, so the
argv of a worker is written once.

A builder gets the environment every child of its launcher shares (``env``) and returns a
:class:`ProcessSpec` with the child's complete environment; it decides nothing about
brokers, databases or configuration files (the plans do).
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from novaq.launcher.flower_guard import flower_command
from novaq.settings import Settings

#: How children run celery: this interpreter, so the venv's celery even when its ``bin/`` is
#: not on the PATH.
CELERY_ARGV: tuple[str, ...] = (sys.executable, "-m", "celery")
#: How children run the ``novaq`` command (``novaq/cli/__main__.py``), with this interpreter.
NOVAQ_ARGV: tuple[str, ...] = (sys.executable, "-m", "novaq.cli")
#: Flower's process name (the launcher moves it to a free port when its own is taken).
FLOWER = "flower"
IMAGE_ENDPOINT = "image-endpoint"
#: ``novaq image-endpoint``'s default port (Glance's).
IMAGE_ENDPOINT_PORT = 9292
LOOPBACK = "127.0.0.1"

#: How the launcher names beat's lease holder (read by ``tasks/beat.py``).
BEAT_HOLDER_ENV = "NOVAQ_BEAT_LEASE_HOLDER"
#: The beat scheduler that waits for the lease instead of exiting (``tasks/beat.py``).
STANDBY_SCHEDULER = "tasks.beat:StandbyScheduler"
_RUN_TOKEN = secrets.token_hex(4)


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One child: its name (log file and output prefix), argv and complete environment.

    ``node`` is the Celery node name a worker answers pings as (None for beat and Flower);
    ``listens`` the address a server accepts connections on once it is ready to serve
    (the image endpoint's; None: nothing to wait for).
    """

    name: str
    argv: list[str]
    env: dict[str, str]
    node: str | None = None
    listens: tuple[str, int] | None = None


def beat_lease_holder(launcher: str = "novaq-up") -> str:
    """One holder for every beat this launcher (re)starts: a beat restarted after a
    SIGKILL takes back its predecessor's lease at once rather than being refused until
    it expires (the supervisor restarts beat only once the old one is reaped). Another
    launcher, on this machine or another, has another holder."""
    return f"{socket.gethostname()}:{launcher}-{os.getpid()}:{_RUN_TOKEN}"


def shared_env(
    env: Mapping[str, str],
    *,
    broker_url: str,
    database_url: str,
    state_dir: Path,
    config: str,
) -> dict[str, str]:
    """What every child of a launcher gets: ``env`` plus the broker, the database, the
    state directory and the TOML file (``config``; "" for none) it was started with."""
    common = dict(env)
    # NOTE: a NOVAQ_HOST inherited from the shell would make every process claim one host;
    # the processes that have a host get theirs explicitly.
    common.pop("NOVAQ_HOST", None)
    common.update(
        NOVAQ_BROKER_URL=broker_url,
        NOVAQ_DATABASE_URL=database_url,
        NOVAQ_STATE_DIR=str(state_dir.resolve()),
        NOVAQ_CONFIG=config,
        PYTHONUNBUFFERED="1",
    )
    return common


def _worker_argv(
    celery: Sequence[str], queues: str, node: str, pool: str, concurrency: int
) -> list[str]:
    return [
        *celery, "-A", "tasks", "worker", "-Q", queues, "-n", node,
        "--pool", pool, "--concurrency", str(concurrency), "-E", "-l", "INFO",
    ]  # fmt: skip


def scheduler_spec(
    settings: Settings,
    env: Mapping[str, str],
    *,
    host: str | None = None,
    celery: Sequence[str] = CELERY_ARGV,
) -> ProcessSpec:
    """The scheduler worker (queues ``scheduler`` and ``maintenance``, prefork), as
    ``scheduler@<host>``: this machine's name unless ``host`` (its ``[DEFAULT] host``,
    which its scheduler service row is registered under) is given."""
    node = f"scheduler@{host or socket.gethostname()}"
    concurrency = settings.celery.scheduler_concurrency
    argv = _worker_argv(celery, "scheduler,maintenance", node, "prefork", concurrency)
    child_env = dict(env) if host is None else {**env, "NOVAQ_HOST": host}
    return ProcessSpec("scheduler", argv, child_env, node)


def compute_spec(
    settings: Settings,
    env: Mapping[str, str],
    host: str,
    *,
    celery: Sequence[str] = CELERY_ARGV,
) -> ProcessSpec:
    """The compute worker of ``host``: queue ``compute.<host>``, node ``compute@<host>``.

    The threads pool, never prefork: libvirt's ``test:///`` driver keeps its guests in the
    memory of the process that opened it, so one compute host must be one process.
    """
    node = f"compute@{host}"
    concurrency = settings.celery.compute_concurrency
    argv = _worker_argv(celery, f"compute.{host}", node, "threads", concurrency)
    return ProcessSpec(f"compute-{host}", argv, {**env, "NOVAQ_HOST": host}, node)


def beat_spec(
    settings: Settings,
    env: Mapping[str, str],
    holder: str,
    *,
    standby: bool = False,
    celery: Sequence[str] = CELERY_ARGV,
) -> ProcessSpec:
    """celery beat, its schedule in the state directory, its lease held as ``holder``.
    A ``standby`` beat waits for a lease another beat holds, and takes it when that one
    dies, instead of exiting (``tasks.beat.StandbyScheduler``)."""
    schedule = settings.state_dir.resolve() / "celerybeat-schedule"
    argv = [*celery, "-A", "tasks", "beat", "-l", "INFO", "--schedule", str(schedule)]
    if standby:
        argv += ["--scheduler", STANDBY_SCHEDULER]
    return ProcessSpec("beat", argv, {**env, BEAT_HOLDER_ENV: holder})


def flower_spec(
    settings: Settings, env: Mapping[str, str], *, celery: Sequence[str] = CELERY_ARGV
) -> ProcessSpec:
    """Flower, authenticated (``flower_guard``: refused on a public address without
    ``[flower] basic_auth``; the credential goes by environment, never argv)."""
    argv, flower_env = flower_command(settings, celery)
    return ProcessSpec(FLOWER, argv, {**env, **flower_env})


def image_endpoint_spec(
    env: Mapping[str, str],
    *,
    address: str | None = None,
    port: int | None = None,
    novaq: Sequence[str] = NOVAQ_ARGV,
) -> ProcessSpec:
    """``novaq image-endpoint``: the HTTP endpoint compute hosts fetch images from
    (``[glance] api_servers``). Without ``address`` or ``port``, the command's own
    defaults apply (every address, port 9292: Glance's). Its group waits until it accepts
    connections (on loopback when it listens on every address) before calling the
    cluster ready, unless its port is 0 (any: not known in advance)."""
    argv = [*novaq, "image-endpoint"]
    if address is not None:
        argv += ["--address", address]
    if port is not None:
        argv += ["--port", str(port)]
    port = IMAGE_ENDPOINT_PORT if port is None else port
    reach = LOOPBACK if address in (None, "0.0.0.0", "") else address  # noqa: S104
    return ProcessSpec(IMAGE_ENDPOINT, argv, dict(env), listens=(reach, port) if port else None)
