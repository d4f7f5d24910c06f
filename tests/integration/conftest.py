"""Integration tier: real Redis, real PostgreSQL, real ``celery worker`` processes.

Uses Redis database 13 (or ``NOVAQ_IT_REDIS_DB``; one more per pytest-xdist worker) and
a PostgreSQL database of its own (``novaq_it_<redis db>_<pid>``), both cleaned up at the end. A
missing server skips the tier locally and fails it in CI.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.brokers import (
    RABBITMQ,
    REDIS,
    VHOST_PREFIX,
    Broker,
    Deployment,
    amqp_queue_length,
    close_connections,
    pointed_at,
    rabbitmq_state,
    rabbitmq_vhost,
    redis_queue_length,
    require_rabbitmq,
    skip_or_fail,
)
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
atexit.register(shutil.rmtree, _STATE, ignore_errors=True)  # (a run leaves no state dir)

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
        skip_or_fail(f"integration tier needs {', '.join(missing)} on loopback")


def _register_cirros() -> None:
    """The image the tests boot ("cirros"): 1 MiB of raw zeros in the tier's image store."""
    from novaq.settings import get_settings
    from workflows.api.images import ensure_demo_image

    ensure_demo_image(get_settings())


def _serve_images() -> Any:
    """The controller's image endpoint (what ``novaq image-endpoint`` runs), in a thread of
    this process; the workers started after read images from it (``[glance] api_servers``)."""
    from compute.transfer import bind_image_endpoint
    from novaq.settings import load_settings

    server = bind_image_endpoint(load_settings(), "127.0.0.1", 0)
    os.environ["NOVAQ_GLANCE__API_SERVERS"] = server.url
    return server.serve_in_thread()


@pytest.fixture(scope="session")
def services() -> Iterator[str]:
    """A fresh PostgreSQL database with the schema, and an empty Redis database."""
    _require_services()
    import redis

    _create_database(PG_DB)
    client = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    client.flushdb()
    url = os.environ["NOVAQ_DATABASE_URL"]
    _migrate_and_register(url)
    images = _serve_images()
    yield url
    images.close()
    from models.db import dispose_all

    dispose_all()
    client.flushdb()
    _drop_database(PG_DB)


def _create_database(name: str) -> None:
    from sqlalchemy import text

    admin = _admin()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()


def _admin() -> Any:
    from sqlalchemy import create_engine

    return create_engine(
        PG_ADMIN_URL.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )


def _drop_database(name: str) -> None:
    from sqlalchemy import text

    admin = _admin()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def _migrate_and_register(url: str) -> None:
    from models.migrate import upgrade

    upgrade(url)
    _register_cirros()


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


@pytest.fixture(scope="session")
def rabbitmq_env(services: str) -> Iterator[dict[str, str]]:
    """The RabbitMQ deployment's settings (``NOVAQ_*``): a vhost, a PostgreSQL database
    (migrated, the cirros image registered) and a state directory of its own; all
    removed at the end of the session."""
    require_rabbitmq()
    db = f"{PG_DB}_amqp"
    _create_database(db)
    vhost = f"{VHOST_PREFIX}_{REDIS_DB}_{os.getpid()}"
    try:
        with rabbitmq_vhost(vhost) as broker_url:
            env = {
                "NOVAQ_BROKER_URL": broker_url,
                "NOVAQ_DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{db}",
                "NOVAQ_STATE_DIR": str(rabbitmq_state(_STATE)),
                # The tier's image endpoint serves one store (``_serve_images``): this
                # deployment's images go there too, under ids of their own.
                "NOVAQ_GLANCE__STORE_PATH": str(_STATE / "images"),
            }
            with pointed_at(env):
                _migrate_and_register(env["NOVAQ_DATABASE_URL"])
            yield env
            close_connections(env)
    finally:
        from models.db import dispose_all

        dispose_all()
        _drop_database(db)


@pytest.fixture(scope="session")
def rabbitmq_hosts(rabbitmq_env: dict[str, str]) -> Iterator[Cluster]:
    """``two_hosts``' twin on RabbitMQ: a scheduler and compute workers for host1 and host2."""
    with pointed_at(rabbitmq_env):
        state = Path(rabbitmq_env["NOVAQ_STATE_DIR"])
        cluster = start_cluster(state, ["host1", "host2"], env=rabbitmq_env)
    yield cluster
    cluster.stop()


@pytest.fixture
def broker(request: pytest.FixtureRequest, services: str) -> Iterator[Broker]:
    """The broker the test runs on: Redis, unless ``@on_both_brokers`` (tests.integration.
    brokers) gives RabbitMQ; during the test this process uses that broker and its database."""
    name = getattr(request, "param", REDIS)
    if name == REDIS:
        yield Broker(REDIS, os.environ["NOVAQ_BROKER_URL"], services, redis_queue_length(REDIS_DB))
        return
    assert name == RABBITMQ, name
    env = request.getfixturevalue("rabbitmq_env")
    url = env["NOVAQ_BROKER_URL"]
    with pointed_at(env):
        yield Broker(RABBITMQ, url, env["NOVAQ_DATABASE_URL"], amqp_queue_length(url))


@pytest.fixture
def deployment(request: pytest.FixtureRequest, broker: Broker) -> Deployment:
    """The broker the test runs on with its scheduler and compute workers (host1, host2)."""
    cluster_fixture = "two_hosts" if broker.name == REDIS else "rabbitmq_hosts"
    return Deployment(broker, request.getfixturevalue(cluster_fixture))
