"""Workers and beat start while the broker or the database is down, stay up, and serve
once it is back (issue 14: "Workers start and keep running while the broker or the
database is down, and resume when it returns").

Each test runs its own scheduler worker, compute worker and beat on a PostgreSQL database
of its own and a private ``redis-server`` (never the shared services, which other tests
and helpers use): the broker is that server before it is started; the database is
reached through a TCP proxy that the test stops and starts (refused connections, cut
connections), with PostgreSQL itself untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from sqlalchemy import create_engine, text

from tests.integration.private_redis import PrivateRedis
from tests.integration.workers import ROOT, Cluster, Worker
from tests.tcp_proxy import TcpProxy, free_port

pytestmark = pytest.mark.integration

PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
SCHEDULER_NODE = "scheduler@nosvc"
RUN_IMMEDIATELY = {"_sync_power_states", "_cleanup_running_deleted_instances"}


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture
def own_db(services: str) -> Iterator[str]:
    """A migrated PostgreSQL database for this test alone, with the "cirros" image (the
    shared tier's database holds other tests' hosts, which this test's scheduler must
    not pick)."""
    from models.db import dispose_all
    from models.migrate import upgrade
    from novaq.settings import get_settings
    from workflows.api.images import ensure_demo_image

    name = f"novaq_nosvc_{os.getpid()}_{time.monotonic_ns()}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = f"postgresql://postgres@127.0.0.1:5432/{name}"
    upgrade(url)
    ensure_demo_image(get_settings().model_copy(update={"database_url": url}))
    yield url
    dispose_all()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(tmp_path / "redis")
    yield redis
    redis.stop()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path)
    yield cluster
    cluster.stop()


# -- helpers -------------------------------------------------------------------------------
def _start_all(cluster: Cluster, host: str, env: dict[str, str], tmp_path: Path) -> None:
    """A scheduler worker, a compute worker for ``host`` and beat, as ``novaq up`` runs them."""
    cluster.add("scheduler", "scheduler,maintenance", SCHEDULER_NODE, "nosvc-scheduler",
                pool="prefork", concurrency=2, extra_env=env)  # fmt: skip
    cluster.add(host, f"compute.{host}", f"compute@{host}", host, extra_env=env)
    argv = [sys.executable, "-m", "celery", "-A", "tasks", "beat", "-l", "INFO",
            "--schedule", str(tmp_path / "beat-schedule")]  # fmt: skip
    beat_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    cluster.workers["beat"] = Worker("beat", argv, beat_env, tmp_path / "beat.log").start()


def _until(what: str, check: Callable[[], Any], cluster: Cluster, timeout_s: float = 90) -> Any:
    """Poll ``check`` until it is truthy; fail at once if a process died meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _assert_alive(cluster)
        if result := check():
            return result
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout_s} s\n{_tails(cluster)}")


def _assert_alive(cluster: Cluster) -> None:
    dead = [name for name, w in cluster.workers.items() if not w.alive()]
    assert not dead, f"{dead} died:\n{_tails(cluster)}"


def _stays_alive(cluster: Cluster, seconds: float) -> None:
    """Every process is still running ``seconds`` from now (checked all along)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _assert_alive(cluster)
        time.sleep(0.25)


def _tails(cluster: Cluster) -> str:
    return "\n".join(f"--- {n}:\n{w.tail(2000)}" for n, w in cluster.workers.items())


def _logged(cluster: Cluster, name: str, text: str) -> Callable[[], bool]:
    return lambda: text in cluster.workers[name].tail(10**6)


def _answering(broker_url: str, nodes: set[str]) -> Callable[[], bool]:
    def check() -> bool:
        app = Celery("probe", broker=broker_url, set_as_current=False)
        try:
            replies = app.control.ping(timeout=1) or []
        finally:
            app.close()
        return nodes <= {node for reply in replies for node in reply}

    return check


def _periodic_runs(db_url: str) -> set[tuple[str, str]]:
    from compute.periodic import runs
    from compute.sessions import sessions_for

    return {key for key, run in runs.last_runs(sessions_for(db_url)).items() if run["run_count"]}


def _run_immediately_ran(db_url: str, host: str) -> Callable[[], bool]:
    return lambda: {(name, host) for name in RUN_IMMEDIATELY} <= _periodic_runs(db_url)


def _boot(env: dict[str, str], name: str) -> dict[str, Any]:
    """A boot through the public API in a process configured like the workers (this
    test's broker and database), waited for until ACTIVE."""
    code = (
        "import json, sys\n"
        "from novaq.exceptions import FlavorExists\n"
        "from workflows import api\n"
        "try:\n"
        "    api.create_flavor('nosvc.tiny', 1, 256, 1)\n"
        "except FlavorExists:\n"
        "    pass\n"
        "[uuid] = api.boot(sys.argv[1], 'nosvc.tiny', 'cirros')\n"
        "print(json.dumps(api.wait(uuid, 'ACTIVE', timeout=90), default=str))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, name],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    server: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return server


# -- the broker ----------------------------------------------------------------------------
def test_workers_and_beat_started_while_the_broker_is_down_serve_once_it_is_up(
    own_db: str, private_redis: PrivateRedis, processes: Cluster, tmp_path: Path
) -> None:
    host = "nosvc-b1"
    env = {
        "NOVAQ_BROKER_URL": private_redis.url(),
        "NOVAQ_DATABASE_URL": own_db,
        # A scheduler task that beat makes due at its start: proof that beat publishes
        # once the broker is up.
        "NOVAQ_SCHEDULER__DISCOVER_HOSTS_IN_CELLS_INTERVAL": "2",
    }
    _start_all(processes, host, env, tmp_path)

    # Both workers wait for the broker (Celery's consumer retries), and outlive two of
    # those retries; beat is up with its lease (it needs only the database for that).
    retrying = "Cannot connect to "
    for name in ("scheduler", host):
        _until(f"{name} retrying", _logged(processes, name, retrying), processes)
        _until(f"{name} retried", _logged(processes, name, "Trying again in 4.00"), processes)
    _until("beat's lease", _logged(processes, "beat", "beat lease taken"), processes)
    assert "Unrecoverable error" not in processes.workers[host].tail(10**6)

    private_redis.start()

    nodes = {SCHEDULER_NODE, f"compute@{host}"}
    _until("the workers answering", _answering(private_redis.url(), nodes), processes)
    _until("the run-immediately tasks run", _run_immediately_ran(own_db, host), processes)
    assert _logged(processes, host, f"Run-immediately periodic tasks of {host} sent")()
    _until(
        "beat's first task run",
        lambda: any(name == "_discover_hosts_in_cells" for name, _ in _periodic_runs(own_db)),
        processes,
    )
    server = _boot(env, "after-the-broker")
    assert server["status"] == "ACTIVE" and server["host"] == host
    _assert_alive(processes)


# -- the database --------------------------------------------------------------------------
def test_workers_and_beat_started_while_the_database_refuses_wait_and_ride_out_an_outage(
    own_db: str, private_redis: PrivateRedis, processes: Cluster, tmp_path: Path
) -> None:
    host = "nosvc-d1"
    # Not listening yet: connections are refused.
    proxy = TcpProxy(5432, port=free_port())
    through_proxy = own_db.replace(":5432/", f":{proxy.port}/")
    env = {"NOVAQ_BROKER_URL": private_redis.url(), "NOVAQ_DATABASE_URL": through_proxy}
    private_redis.start()
    try:
        _start_all(processes, host, env, tmp_path)
        waiting = {
            "scheduler": "Registering scheduler service nosvc-scheduler: the database is "
            "unreachable",
            host: f"Registering compute service {host}: the database is unreachable",
            "beat": "Taking the beat lease: the database is unreachable",
        }
        for name, line in waiting.items():
            _until(f"{name} waiting for the database", _logged(processes, name, line), processes)
        _stays_alive(processes, 5.0)
        assert not _answering(private_redis.url(), {f"compute@{host}"})()  # not consuming

        proxy.start()

        nodes = {SCHEDULER_NODE, f"compute@{host}"}
        _until("the workers answering", _answering(private_redis.url(), nodes), processes)
        _until("the run-immediately tasks run", _run_immediately_ran(own_db, host), processes)
        _until("beat's lease", _logged(processes, "beat", "beat lease taken"), processes)
        for name in waiting:
            assert _logged(processes, name, "the database answered after")()
        assert _boot(env, "after-the-database")["status"] == "ACTIVE"

        # An outage while everything runs: connections cut, new ones refused.
        proxy.refuse()
        heartbeat_lost = "failed: lost connection to the database"
        _until("the heartbeat losing the database", _logged(processes, host, heartbeat_lost),
               processes)  # fmt: skip
        _until("beat pausing", _logged(processes, "beat", "cannot renew its lease"), processes)
        _stays_alive(processes, 3.0)

        proxy.start()

        recovered = "recovered, reporting again"
        _until("the heartbeat back", _logged(processes, host, recovered), processes)
        _until("beat back", _logged(processes, "beat", "renewed its lease after"), processes)
        server = _boot(env, "after-the-outage")
        assert server["status"] == "ACTIVE" and server["host"] == host
        _assert_alive(processes)
    finally:
        processes.stop()
        proxy.refuse()
