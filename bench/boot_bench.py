"""End-to-end boots/s and deletes/s of a novaq cluster against a bare Celery app of the
same shape, on SQLite and on PostgreSQL, with what each boot and delete costs.

    .venv/bin/python bench/boot_bench.py [--hosts 4] [--boots 200] [--repetitions 3] \\
        [--warmup 8] [--heartbeat-boots 100] [--databases sqlite,postgresql] \\
        [--redis-url URL] [--no-durable] [--durable-guest] [--deadline 840]

novaq: ``novaq up``'s cluster (``novaq.launcher``: a prefork scheduler worker, one
threads-pool compute worker per simulated host; no beat, no Flower) boots ``--boots``
servers through ``from workflows import api``, waits until every one is ACTIVE, deletes
them and waits until every one is gone. Bare: ``bench/bare_app.py``, a scheduler step
that replaces itself with a build step on ``compute.<host>``, and a delete step, with
novaq's Celery settings and worker layout, on another database of the same broker.
Durable: the same bare app recording each server's state in the run's kind of database
(a SQLite file, or a PostgreSQL database of its own; one write transaction per publish
and per step, novaq's durability; ``bench/bare_app.py``), the floor of a workflow that
keeps its state in a database, on the same workers (``--no-durable`` leaves it out;
``--durable-guest`` gives its servers a guest: files and a domain on libvirt's test driver,
``bench/bare_guest.py``, the floor of a durable workflow that drives a hypervisor). The
three run interleaved (novaq, bare, durable, novaq, ...), and the medians are printed with
the ratio novaq/bare, then the durable app's against both; then per boot and per delete,
novaq's SQL statements and transactions counted in every process (``bench/sql_counts.py``,
by step) and the broker connections (and HELLO, PING) each side opened; ``api.boot``'s
latency against the bare app's publish; and the latency of novaq's heartbeat, run every
50 ms during the boots of one more run (``--heartbeat-boots``, after the repetitions: its
writes are load the bare app does not get, so they stay out of the compared runs).

The broker is the launcher's embedded Redis (a private ``redis-server``, as ``novaq up``
runs with no ``NOVAQ_BROKER_URL``), so its connection counters count the bench alone;
``--redis-url redis://127.0.0.1:6379/3`` uses that server instead (the bare app on
``--bare-db``; both databases flushed at the start and the end). PostgreSQL: a database of
its own on ``--pg-admin-url``'s server, dropped at the end (the durable app's too).

Exit status: 0 when the run completed (whatever the ratios), 1 when it failed (a server
that did not go ACTIVE, a timeout, a process that died), with everything cleaned up.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
for _name in [n for n in os.environ if n.startswith("NOVAQ_")]:
    del os.environ[_name]

import redis  # noqa: E402
from sqlalchemy import create_engine, select, text  # noqa: E402

from bench import bare_app, bare_guest, boot_report  # noqa: E402
from bench.boot_clusters import bare_cluster, novaq_cluster  # noqa: E402
from bench.boot_runs import BareSide, NovaqSide, Repetition, RunFailed  # noqa: E402
from bench.broker_stats import with_db  # noqa: E402
from novaq.launcher.cluster import Cluster  # noqa: E402
from novaq.settings import Settings  # noqa: E402

FLAVOR = ("bench.tiny", 1, 512, 1)  # name, vCPUs, MB, GB: 200 fit on 4 demo hosts
IMAGE = "cirros"  # registered by the launcher's database preparation
PG_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--hosts", type=int, default=4, help="simulated compute hosts")
    p.add_argument("--boots", type=int, default=200, help="servers booted per repetition")
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--warmup", type=int, default=8, help="unmeasured boots a side first")
    p.add_argument(
        "--heartbeat-boots", type=int, default=100, help="boots of the heartbeat probe's run"
    )
    p.add_argument("--databases", default="sqlite,postgresql")
    p.add_argument("--redis-url", help="a Redis to use (its database) instead of our own")
    p.add_argument("--bare-db", type=int, default=8, help="the bare app's Redis database")
    p.add_argument(
        "--no-durable",
        action="store_true",
        help="leave out the durable bare app (the bare app recording each server's state in"
        " the run's kind of database: a write transaction per publish and per step)",
    )
    p.add_argument(
        "--durable-guest",
        action="store_true",
        help="the durable bare app's servers have a guest (files and a domain on libvirt's"
        " test driver, started at build, destroyed at delete: bench/bare_guest.py)",
    )
    p.add_argument("--pg-admin-url", default=PG_ADMIN_URL)
    p.add_argument("--phase-timeout", type=float, help="seconds a phase may take")
    p.add_argument("--deadline", type=float, default=840.0, help="seconds the run may take")
    p.add_argument("--tmp-dir", help="where the run's temporary directory goes")
    args = p.parse_args(argv)
    if args.durable_guest and args.no_durable:
        p.error(
            "--durable-guest gives the durable bare app's servers guests: not with --no-durable"
        )
    unknown = set(args.databases.split(",")) - {"sqlite", "postgresql"}
    if unknown:
        p.error(f"unknown database(s) {', '.join(sorted(unknown))}: sqlite or postgresql")
    return args


class DeadlinePassed(Exception):
    pass


def _on_alarm(_signum: int, _frame: FrameType | None) -> None:
    raise DeadlinePassed("the run passed its --deadline")


def _on_term(signum: int, _frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """A clean-up that neither the deadline nor a SIGTERM cuts short (it has bounds of
    its own); one that came meanwhile is raised after it."""
    held = {signal.SIGALRM, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


@contextlib.contextmanager
def environment_kept() -> Iterator[None]:
    """This process's environment as it was, once a database's run ends: pointing the API
    at a cluster (``point_api_at``) sets ``NOVAQ_CONFIG`` to that cluster's TOML, which
    the next database's cluster would otherwise read as its own (its image endpoint
    taken for configured, so none started, and its hosts fetching from a dead port)."""
    from novaq.settings import get_settings

    saved = dict(os.environ)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()


# -- the databases ---------------------------------------------------------------------------
@contextlib.contextmanager
def database(kind: str, state: Path, admin_url: str, name: str = "") -> Iterator[str]:
    """A fresh database of ``kind``: its URL; a PostgreSQL one (``name``, by default
    ``bench_boot_<pid>``) is dropped after."""
    from models.db import dispose_all

    if kind == "sqlite":
        try:
            yield f"sqlite:///{state / 'novaq.sqlite'}"
        finally:
            with uninterrupted():
                dispose_all()  # this process's connections (the API's)
        return
    name = name or f"bench_boot_{os.getpid()}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = admin.url.set(database=name, drivername="postgresql")
        yield url.render_as_string(hide_password=False)
    finally:
        with uninterrupted():
            dispose_all()
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()


# -- one database's runs ---------------------------------------------------------------------
def heartbeat_service(db_url: str, host: str) -> int:
    from compute import servicegroup
    from models import Service
    from models.db import session_scope

    with session_scope(db_url) as session:
        found = session.scalars(
            select(Service.id).where(Service.host == host, Service.binary == servicegroup.COMPUTE)
        ).first()
    if found is None:
        raise RunFailed(f"no compute service row for {host}")
    return int(found)


def run_database(
    kind: str,
    args: argparse.Namespace,
    state: Path,
    novaq_url: str,
    bare: BareSide,
    results: dict[str, list[Repetition]],
) -> None:
    """Start novaq's cluster on a fresh database of ``kind``, run the repetitions into
    ``results``, stop it."""
    from novaq.settings import load_settings

    directory = state / kind
    counts_dir = directory / "sql-counts"
    counts_dir.mkdir(parents=True)
    with environment_kept(), database(kind, directory, args.pg_admin_url) as db_url:
        settings = load_settings(state_dir=directory, database_url=db_url, broker_url=novaq_url)
        cluster = novaq_cluster(settings, args.hosts, counts_dir)
        try:
            side = _novaq_side(cluster, db_url, counts_dir, bare)
            try:
                _interleaved(kind, args, side, bare, results)
            finally:
                side.close()
        finally:
            with uninterrupted():
                cluster.stop()


def _novaq_side(cluster: Cluster, db_url: str, counts_dir: Path, bare: BareSide) -> NovaqSide:
    """The cluster started and ready, and this process's API pointed at it."""
    from novaq.launcher.demo import point_api_at

    cluster.start()
    cluster.wait_ready(timeout_s=120.0)
    point_api_at(cluster)
    from workflows import api

    api.create_flavor(*FLAVOR)
    service_id = heartbeat_service(db_url, cluster.hosts[0])
    return NovaqSide(api, db_url, counts_dir, bare.broker, service_id, FLAVOR[0], IMAGE)


def _interleaved(
    kind: str,
    args: argparse.Namespace,
    side: NovaqSide,
    bare: BareSide,
    results: dict[str, list[Repetition]],
) -> None:
    timeout_s = args.phase_timeout or 60.0 + args.boots * 0.5
    if args.warmup:  # unmeasured: each process's first steps (imports, connections, pools)
        _progress(f"{kind}: warm-up ({args.warmup} boots a side)")
        side.run("bench-warmup", args.warmup, timeout_s)
        bare.run(args.warmup, timeout_s)
        if not args.no_durable:
            bare.run(args.warmup, timeout_s, durable=kind, guest=args.durable_guest)
    for rep in range(args.repetitions):
        _progress(f"{kind}: repetition {rep + 1}/{args.repetitions}: novaq")
        results["novaq"].append(side.run(f"bench-{rep}", args.boots, timeout_s))
        _progress(f"{kind}: repetition {rep + 1}/{args.repetitions}: bare")
        results["bare"].append(bare.run(args.boots, timeout_s))
        if not args.no_durable:
            _progress(f"{kind}: repetition {rep + 1}/{args.repetitions}: durable")
            durable_run = bare.run(args.boots, timeout_s, durable=kind, guest=args.durable_guest)
            results["durable"].append(durable_run)
    if args.heartbeat_boots:
        _progress(f"{kind}: {args.heartbeat_boots} boots with the heartbeat probe")
        run = side.run("bench-hb", args.heartbeat_boots, timeout_s, heartbeat=True)
        results["heartbeat"].append(run)


def _progress(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


# -- the run ---------------------------------------------------------------------------------
def run(args: argparse.Namespace, state: Path, runs: boot_report.Runs) -> None:
    """The whole run, its figures into ``runs`` as they come."""
    from novaq.launcher.embedded_broker import EmbeddedRedis
    from novaq.settings import load_settings

    broker = None if args.redis_url else EmbeddedRedis(state / "broker").start()
    base_url = args.redis_url or (broker.url if broker else "")
    novaq_url = base_url if args.redis_url else with_db(base_url, 3)
    bare_url = with_db(base_url, args.bare_db)
    clients = [redis.Redis.from_url(u) for u in (novaq_url, bare_url)]
    try:
        for client in clients:
            client.flushdb()
        os.environ["NOVAQ_BROKER_URL"] = novaq_url
        os.environ["NOVAQ_STATE_DIR"] = str(state)
        hosts = [f"host{i}" for i in range(1, args.hosts + 1)]
        bare_app.configure(bare_url)
        bare_settings = load_settings(state_dir=state / "bare", broker_url=bare_url)
        bare_counts = state / "bare-counts"
        bare_counts.mkdir(parents=True)
        bare = BareSide(bare_app.app, hosts, clients[0], clients[1], bare_counts)
        kinds = args.databases.split(",")
        with contextlib.ExitStack() as whole_run:
            # The durable bare app's environment: where its guests go, and its databases
            # (made before its workers start).
            durable = {bare_guest.DIR_ENV: str(state / "bare")}
            for kind in [] if args.no_durable else kinds:
                where = durable_target(kind, state, args.pg_admin_url)
                durable[bare_app.durable_env(kind)] = whole_run.enter_context(where)
            os.environ.update(durable)  # (this process publishes as the durable app too)
            whole_run.enter_context(bare_workers(bare_settings, hosts, bare_counts, durable))
            for kind in kinds:
                runs[kind] = {"novaq": [], "bare": [], "durable": [], "heartbeat": []}
                run_database(kind, args, state, novaq_url, bare, runs[kind])
    finally:
        with uninterrupted():
            for client in clients:
                with contextlib.suppress(redis.RedisError):
                    client.flushdb()
                client.close()
            if broker is not None:
                broker.stop()


@contextlib.contextmanager
def bare_workers(
    settings: Settings, hosts: list[str], counts_dir: Path, durable: dict[str, str]
) -> Iterator[None]:
    """The bare app's workers, started and ready, then stopped (``durable``: the durable
    app's environment, ``boot_clusters.bare_cluster``'s)."""
    workers = bare_cluster(settings, len(hosts), hosts, counts_dir, durable)
    try:
        workers.start()
        workers.wait_ready(timeout_s=120.0)
        yield
    finally:
        with uninterrupted():
            workers.stop()


@contextlib.contextmanager
def durable_target(kind: str, state: Path, admin_url: str) -> Iterator[str]:
    """Where the durable bare app records (``bench/bare_app.py``'s ``record``): a SQLite
    file, or a PostgreSQL database of its own (dropped after), its table made."""
    with contextlib.ExitStack() as made:
        if kind == "sqlite":
            target = f"{bare_app.SQLITE_PREFIX}{state / 'bare-durable.sqlite'}"
        else:
            name = f"bench_bare_{os.getpid()}"
            target = made.enter_context(database(kind, state, admin_url, name=name))
        made.callback(bare_app.close)  # (this thread's connection, before a drop)
        bare_app.create_table(target)
        yield target


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.signal(signal.SIGTERM, _on_term)
    signal.alarm(int(args.deadline))
    state = Path(tempfile.mkdtemp(prefix="novaq-boot-bench-", dir=args.tmp_dir))
    started = time.monotonic()
    runs: boot_report.Runs = {}
    try:
        run(args, state, runs)
    except Exception as exc:  # noqa: BLE001 - the run failed (RunFailed, DeadlinePassed, ...)
        signal.alarm(0)
        traceback.print_exc()
        print(f"boot_bench: the run failed: {exc}", file=sys.stderr)
        _print_figures(args, runs, started, "INCOMPLETE: the run failed; what it measured")
        return 1
    finally:
        signal.alarm(0)
        shutil.rmtree(state, ignore_errors=True)
    _print_figures(args, runs, started)
    return 0


def _print_figures(
    args: argparse.Namespace, runs: boot_report.Runs, started: float, failed: str = ""
) -> None:
    measured = {kind: sides for kind, sides in runs.items() if sides["novaq"] and sides["bare"]}
    if not measured:
        return
    print(
        f"boot_bench: {args.hosts} hosts, {args.boots} boots, {args.repetitions} "
        f"repetition(s), interleaved novaq/bare"
        + ("" if args.no_durable else "/durable")
        + (" (durable: with a guest)" if args.durable_guest else "")
        + f"; {time.monotonic() - started:.0f} s"
        + (f"\n{failed}" if failed else "")
    )
    print(boot_report.report(measured))


if __name__ == "__main__":
    sys.exit(main())
