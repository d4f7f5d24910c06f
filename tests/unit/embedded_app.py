"""A tiny Celery app for the embedded-broker and cluster tests: one task, JSON only.

Run as ``python -m celery -A embedded_app worker`` with this directory as the working
directory and ``EMBEDDED_BROKER_URL`` set; the tests send ``embedded.add`` by name, so they
never import this module.
"""

from __future__ import annotations

import os

from celery import Celery

BROKER_URL = os.environ["EMBEDDED_BROKER_URL"]

app = Celery("embedded_app", broker=BROKER_URL, backend=BROKER_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    broker_connection_retry_on_startup=True,
)


@app.task(name="embedded.add")
def add(x: int, y: int) -> int:
    return x + y
