"""Leak soak, long form: many cycles of random boots, deletes, resizes, migrations, stops,
starts and reboots on real workers, with spawn failures injected and faults: compute
worker SIGKILLs, broker SIGKILLs and restarts, database outages. Prints what it did and
what it found; exits 1 if a server is stuck, an operation was lost, the accounting leaks
or a worker died on its own, 3 if the run itself passed its deadline (it never hangs).

    .venv/bin/python bench/leak_soak.py --cycles 500 --kills 5 \\
        --broker-restarts 2 --db-outages 2 --db-outage-s 10

By default the broker is a redis-server of the soak's own (AOF, appendfsync always) on a
free port in a temporary directory, so it can be killed; ``--redis-url`` uses an existing
Redis instead (its database is flushed; no broker restarts then). The workers reach
PostgreSQL through a TCP proxy (``tests/tcp_proxy.py``) that refuses during
an outage; the soak's own API calls go straight to PostgreSQL, so it keeps sending
requests and watching. It creates a database of its own on the ``--pg-url`` server and
drops it at the end, so it can run beside the test suite.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HOSTS = ("soak1", "soak2")
#: Exit statuses: clean, something found, the run itself passed its deadline.
CLEAN, FOUND, HUNG = 0, 1, 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--cycles", type=int, default=500)
    p.add_argument("--kills", type=int, default=5, help="compute worker SIGKILLs")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument(
        "--down-seconds",
        type=float,
        default=0.5,
        help="how long a killed worker stays dead (over 6 s: the API deletes locally)",
    )
    broker = p.add_argument_group("broker")
    broker.add_argument(
        "--redis-url", help="use this Redis (its database is flushed) instead of our own"
    )
    broker.add_argument("--redis-port", type=int, help="port of our own redis-server")
    broker.add_argument("--redis-db", type=int, default=0, help="database in our own Redis")
    broker.add_argument("--broker-restarts", type=int, default=0)
    broker.add_argument(
        "--broker-restart-fresh",
        action="store_true",
        help="restart it empty (a broker that lost everything), not on its AOF",
    )
    broker.add_argument("--broker-down-s", type=float, default=1.0)
    db = p.add_argument_group("database")
    db.add_argument(
        "--pg-url",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="an admin URL of the PostgreSQL server; the soak's database is made on it",
    )
    db.add_argument("--db-outages", type=int, default=0)
    db.add_argument("--db-outage-s", type=float, default=10.0)
    run = p.add_argument_group("run")
    run.add_argument(
        "--settle-s", type=float, default=180.0, help="how long a server may take to settle"
    )
    run.add_argument("--no-power-ops", action="store_true", help="no stop/start/reboot in the mix")
    run.add_argument(
        "--deadline-s",
        type=float,
        help="stop and report HUNG past this (default: generous, from the sizes)",
    )
    run.add_argument("--keep-state", action="store_true", help="keep logs even when clean")
    run.add_argument(
        "--no-beat",
        action="store_true",
        help="no celery beat, so no reaper of operations in flight (to see what it saves)",
    )
    args = p.parse_args(argv)
    if args.redis_url and args.broker_restarts:
        p.error("--broker-restarts needs the soak's own redis-server (omit --redis-url)")
    if args.deadline_s is None:
        faults_s = args.broker_restarts * (args.broker_down_s + 30)
        faults_s += args.db_outages * (args.db_outage_s + 30) + args.kills * 70
        args.deadline_s = 600 + args.cycles * 1.0 + 3 * args.settle_s + faults_s
    return args


class Services:
    """What the soak starts around the cluster, and the way to take it all down (also
    from the watchdog's thread)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.state = Path(tempfile.mkdtemp(prefix="novaq-soak-"))
        self.pg_db = f"novaq_soak_{os.getpid()}"
        admin = urlsplit(args.pg_url)
        self.pg_host, self.pg_port = admin.hostname or "127.0.0.1", admin.port or 5432
        self.admin_url = urlunsplit(admin._replace(scheme="postgresql+psycopg"))
        self.db_url = urlunsplit(admin._replace(path=f"/{self.pg_db}"))
        self.broker: Any = None
        self.proxy: Any = None
        self.cluster: Any = None
        self.created_db = False
        self._down = threading.Lock()

    def start_broker(self) -> str:
        if self.args.redis_url:
            import redis

            redis.Redis.from_url(self.args.redis_url).flushdb()
            return str(self.args.redis_url)
        from tests.integration.private_redis import PrivateRedis, free_port

        port = self.args.redis_port or free_port()
        self.broker = PrivateRedis(self.state / "redis", port).start()
        return str(self.broker.url(self.args.redis_db))

    def create_database(self) -> None:
        from sqlalchemy import create_engine, text

        admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.pg_db}"'))
        admin.dispose()
        self.created_db = True

    def worker_db_url(self) -> str:
        """The database as the workers reach it: through the proxy."""
        from tests.tcp_proxy import TcpProxy

        self.proxy = TcpProxy(self.pg_port, self.pg_host).start()
        proxied = urlsplit(self.db_url)
        netloc = proxied.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.proxy.port}"
        return urlunsplit(
            proxied._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) > 1 else host)
        )

    def start_cluster(self, worker_db_url: str) -> Any:
        from tests.integration.workers import Cluster

        cluster = Cluster(self.state)
        self.cluster = cluster
        common = {"NOVAQ_DATABASE_URL": worker_db_url}
        cluster.add("scheduler", "scheduler,maintenance", "scheduler@soak", "soak-scheduler",
                    pool="prefork", concurrency=2, extra_env=common)  # fmt: skip
        for host in HOSTS:
            config = self.state / f"{host}.toml"
            config.write_text(f'[[hosts]]\nname = "{host}"\nspawn_failure_rate = 0.15\n')
            env = dict(common, NOVAQ_CONFIG=str(config))
            cluster.add(host, f"compute.{host}", f"compute@{host}", host, extra_env=env)
        cluster.wait_ready({"scheduler@soak", *(f"compute@{h}" for h in HOSTS)})
        if not self.args.no_beat:
            self.start_beat(cluster, common)
        return cluster

    def start_beat(self, cluster: Any, env: dict[str, str]) -> None:
        """celery beat, as in a deployment: it runs the reaper of operations in flight
        (shrunk to the soak's time scale) and the other periodic tasks."""
        from tests.integration.workers import ROOT, Worker

        argv = [sys.executable, "-m", "celery", "-A", "tasks", "beat", "-l", "INFO",
                "--schedule", str(self.state / "celerybeat-schedule")]  # fmt: skip
        beat_env = dict(os.environ, PYTHONPATH=str(ROOT), **env, **REAPER)
        worker = Worker("beat", argv, beat_env, self.state / "beat.log").start()
        cluster.workers["beat"] = worker

    def take_down(self, hurry: bool = False) -> None:
        """Everything the soak started, once; ``hurry``: SIGKILL, from the watchdog."""
        if not self._down.acquire(blocking=False):
            return
        if self.cluster is not None:
            for worker in self.cluster.workers.values():
                worker.stop(signal.SIGKILL if hurry else signal.SIGTERM)
        if self.proxy is not None:
            self.proxy.close()
        if self.broker is not None:
            self.broker.kill() if hurry else self.broker.stop()
        if self.args.redis_url:
            import redis

            redis.Redis.from_url(self.args.redis_url, socket_timeout=5).flushdb()
        if self.created_db:
            from sqlalchemy import create_engine, text

            if not hurry:
                from models.db import dispose_all

                dispose_all()
            admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{self.pg_db}" WITH (FORCE)'))
            admin.dispose()


#: The reaper at the soak's time scale: every 2 s, a message counted lost after 15 s.
REAPER = {"NOVAQ_OPERATION_REAP_INTERVAL": "2", "NOVAQ_OPERATION_LOST_AFTER": "15"}


def environment(state: Path, broker_url: str, db_url: str) -> None:
    """Set before anything of novaq is imported: the settings are read once."""
    for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
        del os.environ[name]
    os.environ.update(
        NOVAQ_STATE_DIR=str(state),
        NOVAQ_BROKER_URL=broker_url,
        NOVAQ_DATABASE_URL=db_url,
        NOVAQ_REPORT_INTERVAL="1",
        NOVAQ_SERVICE_DOWN_TIME="6",
        NOVAQ_CELERY__VISIBILITY_TIMEOUT="15",
        NOVAQ_CELERY__UNACKED_RESTORE_INTERVAL="2",
    )


def start_watchdog(services: Services, deadline_s: float) -> None:
    """Past the deadline: print every thread's stack, take everything down, exit HUNG."""

    def fire() -> None:
        print(f"\nHUNG: the soak passed its deadline of {deadline_s:.0f} s", flush=True)
        faulthandler.dump_traceback(all_threads=True)
        try:
            services.take_down(hurry=True)
        finally:
            print(f"logs kept in {services.state}", flush=True)
            os._exit(HUNG)

    timer = threading.Timer(deadline_s, fire)
    timer.daemon = True
    timer.start()


def build_faults(args: argparse.Namespace, services: Services) -> list[Any]:
    from tests.integration.soak_faults import BrokerRestart, DbOutage

    faults: list[Any] = [
        BrokerRestart(services.broker, args.broker_down_s, fresh=args.broker_restart_fresh)
        for _ in range(args.broker_restarts)
    ]
    faults += [DbOutage(services.proxy, args.db_outage_s) for _ in range(args.db_outages)]
    return faults


def main() -> int:
    args = parse_args()
    services = Services(args)
    start_watchdog(services, args.deadline_s)
    print(f"state and logs: {services.state}; deadline {args.deadline_s:.0f} s", flush=True)
    broker_url = services.start_broker()
    environment(services.state, broker_url, services.db_url)
    from tests.integration.soak import Soak

    soak = None
    crashed = None
    try:
        services.create_database()
        from models.migrate import upgrade

        upgrade(services.db_url)
        from novaq.settings import get_settings
        from workflows import api
        from workflows.api.images import ensure_demo_image

        ensure_demo_image(get_settings())  # the "cirros" image the soak boots
        cluster = services.start_cluster(services.worker_db_url())
        print(f"broker {broker_url}; workers reach PostgreSQL via {services.proxy.port}")
        power_ops = not args.no_power_ops
        soak = Soak(api, cluster, "soak1", args.seed, args.settle_s, args.down_seconds,
                    power_ops=power_ops, log=lambda line: print(line, flush=True))  # fmt: skip
        soak.run(args.cycles, args.kills, build_faults(args, services))
    except Exception as exc:  # noqa: BLE001 - report what is known, then fail
        import traceback

        traceback.print_exc()
        crashed = f"{type(exc).__name__}: {exc}"
    finally:
        services.take_down()
    from tests.integration.soak_report import print_report

    clean = print_report(soak.report if soak else None, crashed)
    if clean and not args.keep_state:
        shutil.rmtree(services.state, ignore_errors=True)
    else:
        print(f"logs kept in {services.state}")
    return CLEAN if clean else FOUND


if __name__ == "__main__":
    started = time.monotonic()
    status = main()
    print(f"wall time {time.monotonic() - started:.0f} s, exit status {status}")
    sys.exit(status)
