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

The durable bare app (``boot_bench``'s third side, ``durable``): the same workers, with a
step's message naming a kind of database (``durable="sqlite"`` or ``"postgresql"``): the
publisher and each step then record the server's state in one write transaction of their
own (:func:`record`) in the database of that kind made for the run (``durable_env``: its
URL in the workers' environment, never in a message), with novaq's durability (SQLite:
WAL, ``synchronous`` FULL, ``BEGIN IMMEDIATE``, the same busy timeout; PostgreSQL: a
synchronous commit) and nothing else: the floor of a workflow that keeps its state in a
database, against which novaq's bookkeeping (delivery counts, step records, operations in
flight, actions and events, allocations) can be weighed. With ``guest=True`` in its
messages (``boot_bench --durable-guest``) its servers also have a guest
(``bench/bare_guest.py``: files and a domain on libvirt's test driver), started at build
and destroyed at delete: the floor of a durable workflow that drives a hypervisor.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import Celery, Task

import tasks.celery  # noqa: F401 - novaq's worker signals (publish retry policy, fork hook)
from bench import bare_guest

BROKER_ENV = "BENCH_BARE_BROKER_URL"
HOSTS_ENV = "BENCH_BARE_HOSTS"
#: The kinds of database the durable bare app records in (``durable_env``).
DURABLE_KINDS = ("sqlite", "postgresql")
#: novaq's (``models.db``): a writer waits for SQLite's lock this long.
BUSY_TIMEOUT_S = 30.0

app = Celery("bare", set_as_current=False)
app.config_from_object("celeryconfig")


def configure(broker_url: str) -> None:
    """Point the app at ``broker_url`` (its results too), before its first use."""
    app.conf.update(broker_url=broker_url, result_backend=broker_url, beat_schedule={})


if os.environ.get(BROKER_ENV):  # a worker's (``bench/boot_clusters.py`` sets it)
    configure(os.environ[BROKER_ENV])


def durable_env(kind: str) -> str:
    """The environment variable with the URL of the durable bare app's database of
    ``kind`` (a ``sqlite:///`` file or a PostgreSQL URL), set for its workers."""
    if kind not in DURABLE_KINDS:
        raise ValueError(f"no durable bare app on {kind!r}: {', '.join(DURABLE_KINDS)}")
    return f"BENCH_BARE_DURABLE_{kind.upper()}"


def target_of(durable: str | None) -> str | None:
    """The URL a step of the ``durable`` kind records in (None: not durable, no database
    work)."""
    return os.environ[durable_env(durable)] if durable else None


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


def record(instance_uuid: str, state: str, target: str | None) -> None:
    """With a ``target`` (:func:`target_of`), the server's state in one write transaction
    of its own (a connection per thread and target, as novaq's pool gives each thread
    one); else nothing. SQLite: ``BEGIN IMMEDIATE``, the upsert, ``COMMIT``, as novaq
    writes; PostgreSQL: the upsert alone, its own transaction (one round trip)."""
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


def durable_kwargs(durable: str | None, guest: bool = False) -> dict[str, Any]:
    """What a step's message adds for the durable bare app (nothing for the bare one, whose
    messages stay as they were); ``guest``: its servers have a guest."""
    if not durable:
        return {}
    return {"durable": durable, "guest": True} if guest else {"durable": durable}


@app.task(name="scheduler.bare_select", bind=True)
def select(self: Task, instance_uuid: str, request_id: str, index: int, **durable: Any) -> Any:
    """``durable``: :func:`durable_kwargs`'s, passed on to the build step."""
    hosts = os.environ[HOSTS_ENV].split(",")
    host = hosts[index % len(hosts)]
    record(instance_uuid, "scheduled", target_of(durable.get("durable")))
    kwargs = {"instance_uuid": instance_uuid, "request_id": request_id, "host": host}
    build = app.signature("compute.bare_build", kwargs={**kwargs, **durable}, immutable=True)
    return self.replace(build)


@app.task(name="compute.bare_build")
def build(instance_uuid: str, request_id: str, host: str, **durable: Any) -> dict[str, str]:
    return _on_host(instance_uuid, host, "active", bare_guest.up, **durable)


@app.task(name="compute.bare_delete")
def delete(instance_uuid: str, request_id: str, host: str, **durable: Any) -> dict[str, str]:
    return _on_host(instance_uuid, host, "deleted", bare_guest.down, **durable)


def _on_host(
    instance_uuid: str,
    host: str,
    state: str,
    guest_work: Callable[[str], None],
    durable: str | None = None,
    guest: bool = False,
) -> dict[str, str]:
    """A compute step: the guest's work if the server has one, the server's state recorded
    if the app is durable (:func:`durable_kwargs`), then the step's result."""
    if guest:
        guest_work(instance_uuid)
    record(instance_uuid, state, target_of(durable))
    return {"instance_uuid": instance_uuid, "host": host}
