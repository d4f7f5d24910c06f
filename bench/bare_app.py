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

``boot_bench --bare-durable`` (``DURABLE_ENV``: a SQLite file) makes it a durable bare
app: the publisher and each step record the server's state in one write transaction of
their own (:func:`record`), with novaq's SQLite durability (WAL, ``synchronous`` FULL,
``BEGIN IMMEDIATE``, the same busy timeout) and nothing else: the floor of a workflow that
keeps its state in a database, against which novaq's bookkeeping (delivery counts, step
records, operations in flight, actions and events, allocations) can be weighed.
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
#: The durable bare app's SQLite file (unset: no database work).
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


def record(instance_uuid: str, state: str) -> None:
    """With ``DURABLE_ENV`` set, the server's state in one write transaction of its own
    (a connection per thread, as novaq's pool gives each thread one); else nothing."""
    path = os.environ.get(DURABLE_ENV)
    if not path:
        return
    conn = getattr(_local, "conns", {}).get(path)
    if conn is None:
        conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_S)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS servers (uuid TEXT PRIMARY KEY, state TEXT, at REAL)"
        )
        _local.conns = {**getattr(_local, "conns", {}), path: conn}
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO servers VALUES (?, ?, ?) ON CONFLICT (uuid) DO UPDATE"
            " SET state = excluded.state, at = excluded.at",
            (instance_uuid, state, time.time()),
        )
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


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
