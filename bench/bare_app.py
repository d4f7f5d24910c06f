"""The reference of ``bench/boot_bench.py``: a bare Celery app of novaq's shape.

A boot is a scheduler step on queue ``scheduler`` that ``Task.replace``s itself with a
build step on ``compute.<host>`` (hosts taken round-robin by the boot's index); a delete
is one step on ``compute.<host>``, as novaq's ``terminate_instance``. The steps do no
database work, nothing but what Celery itself does.

Its settings are novaq's: ``celeryconfig`` (JSON, late acks, reject on worker lost,
prefetch 1, the visibility timeout, novaq's Redis transport, events, results, the router
of ``tasks.routing``), and a worker's publish retry policy from ``tasks.celery``; only
the broker differs (``BENCH_BARE_BROKER_URL``: another database of the same Redis) and
beat has nothing to send (:func:`configure`). ``boot_bench`` runs its workers with
novaq's worker layout.

``boot_bench --bare-durable`` (``DURABLE_ENV``: the database of the run, a SQLite file or
a PostgreSQL database of its own) makes it a durable bare app: the publisher and each
step record the server's state in one write transaction of their own (:func:`record`),
with novaq's durability (SQLite: WAL, ``synchronous`` FULL, ``BEGIN IMMEDIATE``, the same
busy timeout; PostgreSQL: a synchronous commit) and nothing else: the floor of a workflow
that keeps its state in a database, against which novaq's bookkeeping (delivery counts,
step records, operations in flight, actions and events, allocations) can be weighed.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any

from celery import Celery, Task

import tasks.celery  # noqa: F401 - novaq's worker signals (publish retry policy, fork hook)

BROKER_ENV = "BENCH_BARE_BROKER_URL"
HOSTS_ENV = "BENCH_BARE_HOSTS"
#: The durable bare app's database, a ``sqlite:///`` URL or a PostgreSQL one (unset: no
#: database work).
DURABLE_ENV = "BENCH_BARE_DURABLE"
#: novaq's (``models.db``): a writer waits for SQLite's lock this long.
BUSY_TIMEOUT_S = 30.0

app = Celery("bare", set_as_current=False)
app.config_from_object("celeryconfig")


def configure(broker_url: str) -> None:
    """Point the app at ``broker_url`` (its results too), before its first use."""
    app.conf.update(broker_url=broker_url, result_backend=broker_url, beat_schedule={})


if os.environ.get(BROKER_ENV):  # a worker's (``bench/boot_clusters.py`` sets it)
    configure(os.environ[BROKER_ENV])


_local = threading.local()
#: The durable bare app's one table: each server's latest state.
_TABLE = "CREATE TABLE IF NOT EXISTS servers (uuid TEXT PRIMARY KEY, state TEXT, at REAL)"
_UPSERT = (
    "INSERT INTO servers VALUES ({p}, {p}, {p}) ON CONFLICT (uuid) DO UPDATE"
    " SET state = excluded.state, at = excluded.at"
)
SQLITE_PREFIX = "sqlite:///"


def create_table(target: str) -> None:
    """The durable bare app's table in ``target`` (a ``sqlite:///`` file, WAL, or a
    PostgreSQL URL), made once before its workers start (concurrent CREATEs can fail)."""
    conn = _connect(target)
    try:
        conn.execute(_TABLE)
    finally:
        conn.close()


def _connect(target: str) -> Any:
    if target.startswith(SQLITE_PREFIX):
        conn = sqlite3.connect(
            target[len(SQLITE_PREFIX) :], isolation_level=None, timeout=BUSY_TIMEOUT_S
        )
        conn.execute("PRAGMA journal_mode=WAL")
        return conn
    import psycopg

    return psycopg.connect(target, autocommit=True)


def record(instance_uuid: str, state: str) -> None:
    """With ``DURABLE_ENV`` set, the server's state in one write transaction of its own
    (a connection per thread and target, as novaq's pool gives each thread one); else
    nothing. SQLite: ``BEGIN IMMEDIATE``, the upsert, ``COMMIT``, as novaq writes;
    PostgreSQL: the upsert alone, its own transaction (one round trip)."""
    target = os.environ.get(DURABLE_ENV)
    if not target:
        return
    conns = getattr(_local, "conns", None)
    if conns is None:
        conns = _local.conns = {}
    conn = conns.get(target)
    if conn is None:
        conn = conns[target] = _connect(target)
    values = (instance_uuid, state, time.time())
    if not target.startswith(SQLITE_PREFIX):
        conn.execute(_UPSERT.format(p="%s"), values)
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(_UPSERT.format(p="?"), values)
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def close() -> None:
    """Close this thread's connections of :func:`record`."""
    for conn in getattr(_local, "conns", {}).values():
        conn.close()
    _local.conns = {}


@app.task(name="scheduler.bare_select", bind=True)
def select(self: Task, instance_uuid: str, request_id: str, index: int) -> Any:
    hosts = os.environ[HOSTS_ENV].split(",")
    host = hosts[index % len(hosts)]
    record(instance_uuid, "scheduled")
    build = app.signature(
        "compute.bare_build",
        kwargs={"instance_uuid": instance_uuid, "request_id": request_id, "host": host},
        immutable=True,
    )
    return self.replace(build)


@app.task(name="compute.bare_build")
def build(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    record(instance_uuid, "active")
    return {"instance_uuid": instance_uuid, "host": host}


@app.task(name="compute.bare_delete")
def delete(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    record(instance_uuid, "deleted")
    return {"instance_uuid": instance_uuid, "host": host}
