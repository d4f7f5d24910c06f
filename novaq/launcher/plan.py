"""The plan of the local cluster behind ``novaq up`` and ``novaq demo``: which processes
run (one scheduler worker, one compute worker per simulated host, beat, Flower; as in the
``Procfile``), with which argv and environment, and the cluster's TOML file (the simulated
hosts, their GPUs, the PCI alias). ``novaq/launcher/cluster.py`` runs the plan.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from novaq.launcher.flower_guard import flower_command
from novaq.launcher.private_files import make_private_dir, write_private_text
from novaq.settings import CLUSTER_CONFIG_FILE, Settings

#: How children run celery: this interpreter, so the venv's celery even when its ``bin/`` is
#: not on the PATH.
CELERY_ARGV: tuple[str, ...] = (sys.executable, "-m", "celery")
#: Flower's process name (the launcher moves it to a free port when its own is taken).
FLOWER = "flower"

GPU_VENDOR_ID = "10de"  # NVIDIA
GPU_PRODUCT_ID = "13f1"  # Quadro M4000
GPU_ADDRESSES = ("0000:08:00.0", "0000:88:00.0")
DEFAULT_PCI_ALIAS = {
    "name": "QuadroM4000-video",
    "vendor_id": GPU_VENDOR_ID,
    "product_id": GPU_PRODUCT_ID,
    "device_type": "type-PCI",
}
DEFAULT_PCI_DEVICE_SPEC = {"vendor_id": GPU_VENDOR_ID, "product_id": GPU_PRODUCT_ID}


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """One child: its name (log file and output prefix), argv and complete environment.

    ``node`` is the Celery node name a worker answers pings as (None for beat and Flower).
    """

    name: str
    argv: list[str]
    env: dict[str, str]
    node: str | None = None


# -- the plan ----------------------------------------------------------------------------
def scheduler_node() -> str:
    return f"scheduler@{socket.gethostname()}"


def cluster_config_path(settings: Settings) -> Path:
    return settings.state_dir.resolve() / CLUSTER_CONFIG_FILE


def plan_processes(
    settings: Settings,
    hosts: Sequence[str],
    broker_url: str,
    env: Mapping[str, str],
    *,
    celery_argv: Sequence[str] = CELERY_ARGV,
) -> list[ProcessSpec]:
    """The cluster's processes. ``env`` is the base environment (usually ``os.environ``).

    Compute workers use the threads pool, never prefork: libvirt's ``test:///`` driver keeps
    its guests in the memory of the process that opened it, so one compute host must be one
    process.
    """
    common = _common_env(settings, broker_url, env)
    celery = list(celery_argv)
    specs = [_scheduler_spec(settings, celery, common)]
    specs += [_compute_spec(settings, celery, common, host) for host in hosts]
    schedule = settings.state_dir.resolve() / "celerybeat-schedule"
    beat = [*celery, "-A", "tasks", "beat", "-l", "INFO", "--schedule", str(schedule)]
    specs.append(ProcessSpec("beat", beat, {**common, BEAT_HOLDER_ENV: beat_lease_holder()}))
    flower_argv, flower_env = flower_command(settings, celery)
    specs.append(ProcessSpec(FLOWER, flower_argv, {**common, **flower_env}))
    return specs


#: How the launcher names beat's lease holder (read by ``tasks/beat.py``).
BEAT_HOLDER_ENV = "NOVAQ_BEAT_LEASE_HOLDER"
_RUN_TOKEN = secrets.token_hex(4)


def beat_lease_holder() -> str:
    """One holder for every beat this launcher (re)starts: a beat restarted after a
    SIGKILL takes back its predecessor's lease at once rather than being refused until
    it expires (the supervisor restarts beat only once the old one is reaped)."""
    return f"{socket.gethostname()}:novaq-up-{os.getpid()}:{_RUN_TOKEN}"


def _common_env(settings: Settings, broker_url: str, env: Mapping[str, str]) -> dict[str, str]:
    common = dict(env)
    # NOTE: a NOVAQ_HOST inherited from the shell would make every process claim one host;
    # only compute workers get one, their own.
    common.pop("NOVAQ_HOST", None)
    common.update(
        NOVAQ_BROKER_URL=broker_url,
        NOVAQ_DATABASE_URL=settings.sqlalchemy_url,
        NOVAQ_STATE_DIR=str(settings.state_dir.resolve()),
        NOVAQ_CONFIG=str(cluster_config_path(settings)),
        PYTHONUNBUFFERED="1",
    )
    return common


def _scheduler_spec(settings: Settings, celery: list[str], env: dict[str, str]) -> ProcessSpec:
    node = scheduler_node()
    argv = [
        *celery, "-A", "tasks", "worker", "-Q", "scheduler,maintenance", "-n", node,
        "--pool", "prefork", "--concurrency", str(settings.celery.scheduler_concurrency),
        "-E", "-l", "INFO",
    ]  # fmt: skip
    return ProcessSpec("scheduler", argv, dict(env), node)


def _compute_spec(
    settings: Settings, celery: list[str], env: dict[str, str], host: str
) -> ProcessSpec:
    node = f"compute@{host}"
    argv = [
        *celery, "-A", "tasks", "worker", "-Q", f"compute.{host}", "-n", node,
        "--pool", "threads", "--concurrency", str(settings.celery.compute_concurrency),
        "-E", "-l", "INFO",
    ]  # fmt: skip
    return ProcessSpec(f"compute-{host}", argv, {**env, "NOVAQ_HOST": host}, node)


# -- the cluster's TOML ------------------------------------------------------------------
def demo_hosts(n_hosts: int) -> list[dict[str, Any]]:
    """``host1``..``hostN``: 16 vCPU, 32768 MB, 500 GB; host1 with two Quadro M4000 GPUs."""
    if n_hosts < 1:
        raise ValueError(f"a cluster needs at least one host, not {n_hosts}")
    hosts: list[dict[str, Any]] = [
        {"name": f"host{i}", "vcpus": 16, "memory_mb": 32768, "local_gb": 500}
        for i in range(1, n_hosts + 1)
    ]
    hosts[0]["pci_devices"] = [
        {"address": address, "vendor_id": GPU_VENDOR_ID, "product_id": GPU_PRODUCT_ID}
        for address in GPU_ADDRESSES
    ]
    return hosts


def write_cluster_config(
    settings: Settings, n_hosts: int, *, user_config: Path | None = None
) -> tuple[Path, list[str]]:
    """Write ``<state_dir>/cluster.toml`` for the children; return it and the host names.

    It starts from the user's TOML (``user_config``, default: the file ``NOVAQ_CONFIG``
    names) so their options are kept. Hosts declared in the settings win; otherwise
    ``n_hosts`` demo hosts are generated, plus the Quadro alias and device spec if the
    settings declare neither a PCI alias nor a device spec. The database URL the cluster
    uses is written too, for the other processes of its directory.
    """
    if user_config is None and os.environ.get("NOVAQ_CONFIG"):
        user_config = Path(os.environ["NOVAQ_CONFIG"])
    data: dict[str, Any] = {}
    if user_config is not None and user_config.is_file():
        data = tomllib.loads(user_config.read_text(encoding="utf-8"))
    if settings.hosts:
        hosts = [h.model_dump(mode="json", exclude_none=True) for h in settings.hosts]
    else:
        hosts = demo_hosts(n_hosts)
        if not settings.pci.alias and not settings.pci.device_spec:
            pci = data.setdefault("pci", {})
            pci["alias"] = [dict(DEFAULT_PCI_ALIAS)]
            pci["device_spec"] = [dict(DEFAULT_PCI_DEVICE_SPEC)]
    data["hosts"] = hosts
    # The database the cluster uses, however it was given (NOVAQ_DATABASE_URL included):
    # the API of a second shell in this directory finds it here (find_local_cluster).
    data["database_url"] = settings.sqlalchemy_url
    path = cluster_config_path(settings)
    make_private_dir(path.parent)
    # 0600: the user's file may hold secrets ([flower] basic_auth, database passwords).
    write_private_text(path, tomli_w.dumps(data))
    return path, [h["name"] for h in hosts]
