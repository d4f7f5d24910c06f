"""The plan of the local cluster behind ``novaq up`` and ``novaq demo``: which processes
run (one scheduler worker, one compute worker per simulated host, beat, Flower; as in the
``Procfile``; each built by ``specs.py``, as the roles' are), with which environment, and
the cluster's TOML file (the simulated hosts, their GPUs, the PCI alias).
``novaq/launcher/cluster.py`` runs the plan.
"""

from __future__ import annotations

import os
import secrets
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomli_w

from novaq.launcher.private_files import make_private_dir, write_private_text
from novaq.launcher.specs import (
    BEAT_HOLDER_ENV,
    CELERY_ARGV,
    FLOWER,
    LOOPBACK,
    ProcessSpec,
    beat_lease_holder,
    beat_spec,
    compute_spec,
    flower_spec,
    image_endpoint_spec,
    scheduler_spec,
    shared_env,
)
from novaq.settings import CLUSTER_CONFIG_FILE, Settings

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


# -- the plan ----------------------------------------------------------------------------
def cluster_config_path(settings: Settings) -> Path:
    return settings.state_dir.resolve() / CLUSTER_CONFIG_FILE


def plan_processes(
    settings: Settings,
    hosts: Sequence[str],
    broker_url: str,
    env: Mapping[str, str],
    *,
    celery_argv: Sequence[str] = CELERY_ARGV,
    image_port: int | None = None,
) -> list[ProcessSpec]:
    """The cluster's processes. ``env`` is the base environment (usually ``os.environ``).

    Every child reads the cluster's TOML (``write_cluster_config``), which names the
    simulated hosts; each compute worker plays one of them. With ``image_port``, the
    cluster serves its images on ``127.0.0.1:<image_port>`` (``novaq image-endpoint``), as
    a controller does, so a one-machine cluster's hosts fetch images and pull each
    other's disks over the network like the hosts of many machines.
    """
    common = shared_env(
        env,
        broker_url=broker_url,
        database_url=settings.sqlalchemy_url,
        state_dir=settings.state_dir,
        config=str(cluster_config_path(settings)),
    )
    celery = list(celery_argv)
    specs = [scheduler_spec(settings, common, celery=celery)]
    specs += [compute_spec(settings, common, host, celery=celery) for host in hosts]
    specs.append(beat_spec(settings, common, beat_lease_holder(), celery=celery))
    specs.append(flower_spec(settings, common, celery=celery))
    if image_port is not None:
        specs.append(image_endpoint_spec(common, address=LOOPBACK, port=image_port))
    return specs


__all__ = ["BEAT_HOLDER_ENV", "CELERY_ARGV", "FLOWER", "ProcessSpec", "plan_processes"]


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
    settings: Settings,
    n_hosts: int,
    *,
    user_config: Path | None = None,
    image_port: int | None = None,
) -> tuple[Path, list[str]]:
    """Write ``<state_dir>/cluster.toml`` for the children; return it and the host names.

    It starts from the user's TOML (``user_config``, default: the file ``NOVAQ_CONFIG``
    names) so their options are kept. Hosts declared in the settings win; otherwise
    ``n_hosts`` demo hosts are generated, plus the Quadro alias and device spec if the
    settings declare neither a PCI alias nor a device spec. The database URL the cluster
    uses is written too, for the other processes of its directory. So are a transfer
    secret of the cluster's own unless the settings give one (the hosts' disk endpoints
    and the image endpoint sign with it) and, with ``image_port``, the image endpoint the
    hosts fetch from (``[glance] api_servers``).
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
    if settings.transfer.secret is None:
        data.setdefault("transfer", {})["secret"] = secrets.token_urlsafe(32)
    if image_port is not None:
        data.setdefault("glance", {})["api_servers"] = [f"http://{LOOPBACK}:{image_port}"]
    path = cluster_config_path(settings)
    make_private_dir(path.parent)
    # 0600: it holds secrets ([transfer] secret, the user's [flower] basic_auth, database
    # passwords).
    write_private_text(path, tomli_w.dumps(data))
    return path, [h["name"] for h in hosts]
