"""The in-thread Celery worker the API tests run whole workflows through."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery.contrib.testing.worker import start_worker

from tasks import app


@pytest.fixture
def worker(db_url: str) -> Iterator[None]:
    """A real Celery worker in a thread consuming the scheduler and compute.host1 queues:
    its bootstep registers host1 from libvirt's test:/// driver, as a real worker does."""
    with start_worker(
        app,
        queues=["scheduler", "compute.host1"],
        perform_ping_check=False,
        pool="threads",
        concurrency=2,
        shutdown_timeout=30,
    ):
        yield
