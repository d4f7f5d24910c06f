"""Multi-host tier: novaq on several machines, each a network namespace of this box.

Runs as root only (it makes namespaces, veths and a bridge with iproute2): without root or
``ip`` it skips locally and fails in CI (``CI=true``), as does a missing PostgreSQL or
broker. The broker is Redis (``NOVAQ_MH_BROKER=redis``, the default; database
``NOVAQ_MH_REDIS_DB``, 11 unless set) or RabbitMQ (``NOVAQ_MH_BROKER=rabbitmq``, a vhost of
the run's own). The PostgreSQL database is ``<NOVAQ_MH_DB_PREFIX>_<pid>`` (prefix
``novaq_mh``). Everything is removed at the end, failed or not; namespaces a crashed run
left are removed at the next start. ``NOVAQ_MH_KEEP_LOGS=<dir>`` keeps every machine's
log there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.multihost import netns, roles
from tests.multihost.cloud import CONTROLLER, Cloud, wait_until
from tests.tcp_proxy import reachable

BROKER = os.environ.get("NOVAQ_MH_BROKER", "redis")
REDIS_DB = int(os.environ.get("NOVAQ_MH_REDIS_DB", "11"))
PG_DB = f"{os.environ.get('NOVAQ_MH_DB_PREFIX', 'novaq_mh')}_{os.getpid()}"
VHOST = f"{os.environ.get('NOVAQ_MH_DB_PREFIX', 'novaq_mh')}_{os.getpid()}"
PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
_BASE = Path(tempfile.mkdtemp(prefix="novaq-mh-"))
#: The API's machine is the controller: the test process keeps its state there.
_CONTROLLER_STATE = _BASE / "ctl" / "state"
IMAGE_STORE = _CONTROLLER_STATE / "images"

COMPUTE_HOSTS = ("mh1", "mh2", "mh3")
#: Two controllers: the first on the machine that carries the database and the broker.
CONTROLLERS = (CONTROLLER, "ctl2")

#: Every machine's timings, and the test process's: short, so a dead or cut-off machine
#: shows within the test's patience.
TIMINGS = {
    "NOVAQ_REPORT_INTERVAL": "1",
    "NOVAQ_SERVICE_DOWN_TIME": "6",
    # A SIGKILLed worker's messages come back after the visibility timeout (Redis).
    "NOVAQ_CELERY__VISIBILITY_TIMEOUT": "15",
    "NOVAQ_CELERY__UNACKED_RESTORE_INTERVAL": "2",
    # Beat fans the per-host periodic tasks out every 5 s (each expiring after as long),
    # so a cut-off host's queue gets some before the host counts as down.
    "NOVAQ_PERIODIC__DEFAULT_SPACING": "5",
    # Images and moved disks travel signed with the key every machine shares.
    "NOVAQ_TRANSFER__SECRET": secrets.token_hex(16),
}

if BROKER == "rabbitmq":
    _BROKER_URL = f"amqp://guest:guest@{{address}}:5672/{VHOST}"
    _BROKER_PORT = 5672
    # Results come back on the caller's own reply queue (Celery's "amqp" result backend
    # is gone; without this novaq would derive it from the broker URL).
    TIMINGS["NOVAQ_RESULT_BACKEND"] = "rpc://"
else:
    _BROKER_URL = f"redis://{{address}}:6379/{REDIS_DB}"
    _BROKER_PORT = 6379
_DATABASE_URL = f"postgresql://postgres@{{address}}:5432/{PG_DB}"


for _name in [n for n in os.environ if n.startswith("NOVAQ_") and not n.startswith("NOVAQ_MH_")]:
    del os.environ[_name]
os.environ.update(
    TIMINGS,
    NOVAQ_STATE_DIR=str(_CONTROLLER_STATE),
    NOVAQ_BROKER_URL=_BROKER_URL.format(address="127.0.0.1"),
    NOVAQ_DATABASE_URL=_DATABASE_URL.format(address="127.0.0.1"),
    NOVAQ_HOST="mh-api",
)


def _unavailable(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def _require() -> None:
    reason = netns.unavailable_reason()
    if reason:
        _unavailable(reason)
    services = {"PostgreSQL": 5432, BROKER: _BROKER_PORT}
    missing = [name for name, port in services.items() if not reachable(port)]
    if missing:
        _unavailable(f"the multi-host tier needs {', '.join(missing)} on loopback")


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def _broker() -> Iterator[None]:
    """An empty broker of the run's own: Redis database flushed, or a new vhost."""
    if BROKER == "rabbitmq":
        _rabbitmqctl("add_vhost", VHOST)
        _rabbitmqctl("set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*")
        try:
            yield
        finally:
            _rabbitmqctl("delete_vhost", VHOST)
        return
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=REDIS_DB)
    client.flushdb()
    try:
        yield
    finally:
        client.flushdb()


@contextlib.contextmanager
def _database() -> Iterator[None]:
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{PG_DB}"'))
        conn.execute(text(f'CREATE DATABASE "{PG_DB}"'))
    try:
        # As an operator does, once from one machine: a role never migrates.
        subprocess.run(
            roles.db_upgrade_argv(),
            env={**os.environ, "PYTHONPATH": str(roles.ROOT)},
            check=True,
            capture_output=True,
            timeout=300,
        )
        yield
    finally:
        from models.db import dispose_all

        dispose_all()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{PG_DB}" WITH (FORCE)'))
        admin.dispose()


def _demo_image() -> None:
    """The demo image "cirros" in the API's image store (this process is the API, on the
    controller's machine): the controllers' image endpoints serve it from there."""
    from novaq.settings import get_settings
    from workflows.api.images import ensure_demo_image

    assert ensure_demo_image(get_settings()) is not None


def beat_holder() -> str:
    """The holder of beat's lease ("<machine's hostname>:novaq-controller-<pid>:…"), ""
    for none."""
    from compute.periodic import beat_lease
    from compute.sessions import sessions_for

    lease = beat_lease.holder_of(sessions_for(os.environ["NOVAQ_DATABASE_URL"]))
    return "" if lease is None else lease.holder


@pytest.fixture(scope="session")
def cloud() -> Iterator[Cloud]:
    """The controller machine (database, broker), two controllers (the first's beat
    holding the lease, the second's standing by) and three compute machines, all up and
    answering."""
    _require()
    netns.remove_stale()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_broker())
        stack.enter_context(_database())
        cloud = Cloud.create(_BASE, _BROKER_URL, _DATABASE_URL, TIMINGS)
        keep = os.environ.get("NOVAQ_MH_KEEP_LOGS")
        stack.callback(cloud.destroy, Path(keep) / PG_DB if keep else None)
        _demo_image()
        cloud.add_controller(CONTROLLER, IMAGE_STORE)
        wait_until(
            f"{CONTROLLER}'s beat holding the lease",
            lambda: beat_holder().startswith(f"{CONTROLLER}:"),
            120,
        )
        for name in CONTROLLERS[1:]:
            cloud.add_controller(name, IMAGE_STORE)
        for host in COMPUTE_HOSTS:
            cloud.add_compute(host)
        cloud.wait_ready(
            {f"scheduler@{name}" for name in CONTROLLERS}
            | {f"compute@{host}" for host in COMPUTE_HOSTS}
        )
        wait_until("three compute services up", lambda: set(up_computes()) >= set(COMPUTE_HOSTS))
        yield cloud


def up_computes() -> list[str]:
    from workflows import api

    return [
        s["host"]
        for s in api.list_services()
        if s["binary"] == "novaq-compute" and s["up"] and s["status"] == "enabled"
    ]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[Any]:
    """A failed test's report ends with every machine's log tail."""
    outcome: Any = yield
    report = outcome.get_result()
    cloud = item.funcargs.get("cloud") if hasattr(item, "funcargs") else None
    if report.failed and isinstance(cloud, Cloud):
        report.sections.append(("machines' logs", cloud.logs()))
