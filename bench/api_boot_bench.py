"""``api.boot`` against the bare publish of the same message, and heartbeats under readers.

    .venv/bin/python bench/api_boot_bench.py --broker redis://127.0.0.1:6379/15 [--boots 200]
        [--database sqlite|postgresql] [--readers 2]

1. ``api.boot``: novaq's whole call (validation, the read-only lookup, the one write
   transaction, the pooled publish) and, interleaved with it in the same run, the bare
   publish of the same workflow message (``scheduler.select_destinations`` with its
   errback, through the same Celery app and broker): medians and their ratio (issue 16
   goal: at most 5x), SQL statements, transactions, commits and pooled connection
   checkouts per boot, broker connections opened per boot (kombu's connects in this
   process; 0 once the pools are warm).
2. Heartbeats (``tasks.bootsteps.Heartbeat.report``) while ``--readers`` threads run
   20 ms read transactions (a scheduler's candidate load) back to back, and a writer boots:
   p50/p95 of a heartbeat with the readers read-only, then with them as writers'
   transactions (BEGIN IMMEDIATE, as every transaction was before read-only ones), in the
   same run (goal: p95 under 10 ms).

The broker's queues this run filled are purged at the end. Figures are noisy on a shared
machine: compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STATE = Path(tempfile.mkdtemp(prefix="novaq-bench-"))
atexit.register(shutil.rmtree, STATE, ignore_errors=True)  # (a run leaves no state dir)
PG_NAME = f"novaq_bench_boot_{os.getpid()}"

from pg_databases import drop_pg, pg_url  # noqa: E402


def _configure(broker: str, database: str) -> str:
    for name in [n for n in os.environ if n.startswith("NOVAQ_")]:
        del os.environ[name]
    url = f"sqlite:///{STATE}/boot.sqlite"
    if database == "postgresql":
        url = pg_url(PG_NAME)  # a new, empty database
    os.environ.update(
        NOVAQ_STATE_DIR=str(STATE),
        NOVAQ_DATABASE_URL=url,
        NOVAQ_BROKER_URL=broker,
        NOVAQ_RESULT_BACKEND=broker,
    )
    return url


class Counts:
    """Statements, transactions, commits and pooled connection checkouts on the API's
    engine (each checkout costs a round trip on a network database: the pool's ping; each
    transaction its BEGIN and its end, neither of them a statement here)."""

    def __init__(self, url: str) -> None:
        from sqlalchemy import event

        from models.db import engines_of

        self.statements = self.transactions = self.commits = self.checkouts = 0
        for engine in engines_of(url):  # (SQLite's readers have an engine of their own)
            event.listen(engine, "before_cursor_execute", self._statement)
            event.listen(engine, "begin", self._begin)
            event.listen(engine, "commit", self._commit)
            event.listen(engine, "checkout", self._checkout)

    def _statement(self, *_: Any) -> None:
        self.statements += 1

    def _begin(self, *_: Any) -> None:
        self.transactions += 1

    def _commit(self, *_: Any) -> None:
        self.commits += 1

    def _checkout(self, *_: Any) -> None:
        self.checkouts += 1


class BrokerConnections:
    """Broker connections this process establishes (kombu's connect; Redis's own
    ``total_connections_received`` counts every client of the server, other runs too)."""

    def __init__(self) -> None:
        from kombu.connection import Connection

        self.opened = 0
        real = Connection._establish_connection

        def establish(conn: Any) -> Any:
            self.opened += 1
            return real(conn)

        Connection._establish_connection = establish


def _bare_publish(app: Any, request_id: str, spec: dict[str, Any]) -> None:
    """The same workflow message, published by the same app with nothing around it."""
    signature = app.signature(
        "scheduler.select_destinations",
        kwargs={
            "request_id": request_id,
            "instance_uuids": [spec["instance_uuid"]],
            "request_spec": spec,
        },
        queue="scheduler",
    )
    signature.on_error(app.signature("scheduler.on_build_error"))
    signature.apply_async()


def bench_boot(url: str, boots: int) -> None:
    from novaq.celery_app import app
    from tests.factories import register_cirros
    from workflows import api
    from workflows.api import common

    register_cirros(url, common.settings().image_store_path)
    api.create_flavor("bench", 1, 512, 1)
    [warm] = api.boot("warm", "bench", "cirros")  # the pools connect once
    spec = api.show(warm)
    request_spec = {"instance_uuid": warm, "flavor": spec["flavor"], "image": "cirros"}
    _bare_publish(app, "req-warm", request_spec)
    counts, connections = Counts(url), BrokerConnections()
    boot_s, bare_s = [], []
    for i in range(boots):
        started = time.perf_counter()
        api.boot(f"b{i}", "bench", "cirros")
        boot_s.append(time.perf_counter() - started)
        request_spec["instance_uuid"] = str(uuid.uuid4())
        started = time.perf_counter()
        _bare_publish(app, f"req-{i}", request_spec)
        bare_s.append(time.perf_counter() - started)
    boot_ms, bare_ms = statistics.median(boot_s) * 1e3, statistics.median(bare_s) * 1e3
    print(f"api.boot          median {boot_ms:7.2f} ms   p90 {_p(boot_s, 90) * 1e3:7.2f} ms")
    print(f"bare publish      median {bare_ms:7.2f} ms   p90 {_p(bare_s, 90) * 1e3:7.2f} ms")
    print(f"ratio             {boot_ms / bare_ms:.1f}x (goal <= 5x)")
    # The bare publishes run no SQL: the counts are the boots'.
    print(
        f"per boot          {counts.statements / boots:.1f} statements, "
        f"{counts.transactions / boots:.1f} transactions, {counts.commits / boots:.1f} commits, "
        f"{counts.checkouts / boots:.1f} connection checkouts, "
        f"{connections.opened / boots:.2f} broker connections opened (boot and bare publish)"
    )


def _p(values: list[float], percent: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, len(ordered) * percent // 100)]


def bench_heartbeats(url: str, readers: int, reports: int = 50) -> None:
    from compute.servicegroup import COMPUTE, register_service
    from models.db import session_scope
    from novaq.settings import get_settings
    from tasks.bootsteps import Heartbeat

    with session_scope(url) as session:
        service_id = register_service(session, "bench", COMPUTE, "compute.bench", get_settings()).id
    beat = Heartbeat(None, url, service_id, 10.0)
    print(f"heartbeat with {readers} readers of 20 ms and a booting writer:")
    for read_only in (True, False):
        took = _heartbeats_among(url, beat, readers, read_only, reports)
        label = "read-only readers " if read_only else "readers as writers"
        print(f"  {label}  p50 {_p(took, 50) * 1e3:7.2f} ms   p95 {_p(took, 95) * 1e3:7.2f} ms")


def _heartbeats_among(
    url: str, beat: Any, readers: int, read_only: bool, reports: int
) -> list[float]:
    """How long each of ``reports`` heartbeats took while the readers and a writer ran."""
    from sqlalchemy import select

    from models import ComputeNode
    from models.db import session_scope
    from workflows import api

    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            with session_scope(url, read_only=read_only) as session:
                list(session.scalars(select(ComputeNode.id)))
                time.sleep(0.02)

    def write() -> None:
        i = 0
        while not stop.is_set():
            api.boot(f"hb{i}", "bench", "cirros")
            i += 1
            time.sleep(0.01)

    threads = [threading.Thread(target=read) for _ in range(readers)]
    threads.append(threading.Thread(target=write))
    for thread in threads:
        thread.start()
    took = []
    try:
        for _ in range(reports):
            started = time.perf_counter()
            beat.report()
            took.append(time.perf_counter() - started)
            time.sleep(0.005)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return took


def _purge(broker: str) -> None:
    from novaq.celery_app import app

    with app.connection_for_write() as conn:
        for queue in ("scheduler",):
            conn.SimpleQueue(queue).clear()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--database", default="sqlite", choices=("sqlite", "postgresql"))
    parser.add_argument("--boots", type=int, default=200)
    parser.add_argument("--readers", type=int, default=2)
    args = parser.parse_args()
    url = _configure(args.broker, args.database)
    from models.db import dispose_all
    from models.migrate import upgrade

    upgrade(url)
    try:
        print(f"{args.database}, broker {args.broker}, {args.boots} boots")
        bench_boot(url, args.boots)
        bench_heartbeats(url, args.readers)
    finally:
        _purge(args.broker)
        dispose_all()
        if args.database == "postgresql":
            drop_pg(PG_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
