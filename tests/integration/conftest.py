"""Integration tier: real Redis, real PostgreSQL, real ``celery worker`` processes.

Uses Redis database 13 (or ``NOVAQ_IT_REDIS_DB``; one more per pytest-xdist worker) and
a PostgreSQL database of its own (``novaq_it_<redis db>_<pid>``), both cleaned up at the end. A
missing server skips the tier locally and fails it in CI.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.workers import Cluster, Worker, start_cluster

__all__ = ["Cluster", "Worker", "start_cluster"]

# Another Redis database for a second run side by side (NOVAQ_IT_REDIS_DB); under
# pytest-xdist each worker process (gw0, gw1, ...) takes the next one, so two workers'
# clusters never share a queue.
_XDIST_INDEX = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
REDIS_DB = int(os.environ.get("NOVAQ_IT_REDIS_DB", "13")) + _XDIST_INDEX
PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
# Named after the Redis database too: runs side by side (CI's on 13, a helper's on another)
# never share a PostgreSQL database even when their pids coincide (containers).
PG_DB = f"novaq_it_{REDIS_DB}_{os.getpid()}"
ROOT = Path(__file__).resolve().parents[2]
_STATE = Path(tempfile.mkdtemp(prefix="novaq-it-"))

for _name in [n for n in os.environ if n.startswith("NOVAQ_")]:
    del os.environ[_name]
os.environ.update(
    NOVAQ_STATE_DIR=str(_STATE),
    NOVAQ_BROKER_URL=f"redis://127.0.0.1:6379/{REDIS_DB}",
    NOVAQ_DATABASE_URL=f"postgresql://postgres@127.0.0.1:5432/{PG_DB}",
    NOVAQ_HOST="it-client",
    NOVAQ_REPORT_INTERVAL="1",
    NOVAQ_SERVICE_DOWN_TIME="6",
    # Steps take well under a second here; a short visibility timeout brings back the
    # messages of a SIGKILLed worker within the test's patience.
    NOVAQ_CELERY__VISIBILITY_TIMEOUT="15",
    NOVAQ_CELERY__UNACKED_RESTORE_INTERVAL="2",
    NOVAQ_ALLOW_RESIZE_TO_SAME_HOST="true",
    NOVAQ_CONFIG=str(_STATE / "novaq.toml"),
    # Images and moved disks travel over HTTP, signed (virt.transfer), as across machines.
    NOVAQ_TRANSFER__SECRET="novaq-integration-tier",
)
# Both hosts carry two Quadro M4000 GPUs, at different addresses, so a test can tell which
# host's devices a guest has.
(_STATE / "novaq.toml").write_text(
    """
[[pci.alias]]
name = "QuadroM4000-video"
vendor_id = "10de"
product_id = "13f1"

[[pci.device_spec]]
vendor_id = "10de"
product_id = "13f1"

[[hosts]]
name = "host1"
pci_devices = [
    { address = "0000:08:00.0", vendor_id = "10de", product_id = "13f1" },
    { address = "0000:88:00.0", vendor_id = "10de", product_id = "13f1" },
]

[[hosts]]
name = "host2"
pci_devices = [
    { address = "0000:09:00.0", vendor_id = "10de", product_id = "13f1" },
    { address = "0000:89:00.0", vendor_id = "10de", product_id = "13f1" },
]
"""
)


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _require_services() -> None:
    missing = [
        name for name, port in (("Redis", 6379), ("PostgreSQL", 5432)) if not _reachable(port)
    ]
    if missing:
        message = f"integration tier needs {', '.join(missing)} on loopback"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


def _register_cirros() -> None:
    """The image the tests boot ("cirros"): 1 MiB of raw zeros in the tier's image store."""
    from novaq.settings import get_settings
    from workflows.api.images import ensure_demo_image

    ensure_demo_image(get_settings())


def _serve_images() -> Any:
    """The controller's image endpoint (what ``novaq image-endpoint`` runs), in a thread of
    this process; the workers started after read images from it (``[glance] api_servers``)."""
    from compute.transfer import transfer_key
    from novaq.settings import load_settings
    from virt.transfer.file_server import bind
    from virt.transfer.names import image_resolver
    from workflows.api.images_store import store_path

    settings = load_settings()
    key = transfer_key(settings)
    server = bind("127.0.0.1", 0, key, image_resolver(store_path(settings)))  # type: ignore[arg-type]
    os.environ["NOVAQ_GLANCE__API_SERVERS"] = server.url
    return server.serve_in_thread()


@pytest.fixture(scope="session")
def services() -> Iterator[str]:
    """A fresh PostgreSQL database with the schema, and an empty Redis database."""
    _require_services()
    import redis
    from sqlalchemy import create_engine, text

    from models.migrate import upgrade

    admin = create_engine(
        PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{PG_DB}"'))
        conn.execute(text(f'CREATE DATABASE "{PG_DB}"'))
    client = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    client.flushdb()
    url = os.environ["NOVAQ_DATABASE_URL"]
    upgrade(url)
    _register_cirros()
    images = _serve_images()
    yield url
    images.close()
    from models.db import dispose_all

    dispose_all()
    client.flushdb()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def two_hosts(services: str) -> Iterator[Cluster]:
    """A scheduler and compute workers for host1 and host2 (libvirt test:///)."""
    cluster = start_cluster(_STATE, ["host1", "host2"])
    yield cluster
    cluster.stop()


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    """Servers to delete once the test ends, whatever it left them in."""
    from workflows import api

    uuids: list[str] = []
    yield uuids
    for uuid in uuids:
        with contextlib.suppress(Exception):
            api.delete(uuid)
            api.wait(uuid, "DELETED", timeout=30)


@pytest.fixture
def state_dir() -> Path:
    return _STATE
