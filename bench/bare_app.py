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
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Task

import tasks.celery  # noqa: F401 - novaq's worker signals (publish retry policy, fork hook)

BROKER_ENV = "BENCH_BARE_BROKER_URL"
HOSTS_ENV = "BENCH_BARE_HOSTS"

app = Celery("bare", set_as_current=False)
app.config_from_object("celeryconfig")


def configure(broker_url: str) -> None:
    """Point the app at ``broker_url`` (its results too), before its first use."""
    app.conf.update(broker_url=broker_url, result_backend=broker_url, beat_schedule={})


if os.environ.get(BROKER_ENV):  # a worker's (``bench/boot_clusters.py`` sets it)
    configure(os.environ[BROKER_ENV])


@app.task(name="scheduler.bare_select", bind=True)
def select(self: Task, instance_uuid: str, request_id: str, index: int) -> Any:
    hosts = os.environ[HOSTS_ENV].split(",")
    host = hosts[index % len(hosts)]
    build = app.signature(
        "compute.bare_build",
        kwargs={"instance_uuid": instance_uuid, "request_id": request_id, "host": host},
        immutable=True,
    )
    return self.replace(build)


@app.task(name="compute.bare_build")
def build(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return {"instance_uuid": instance_uuid, "host": host}


@app.task(name="compute.bare_delete")
def delete(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    return {"instance_uuid": instance_uuid, "host": host}
