"""The in-thread Celery worker the API tests run whole workflows through."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.workflows.servers import in_thread_worker


@pytest.fixture
def worker(db_url: str) -> Iterator[None]:
    """A real Celery worker in a thread consuming the scheduler and compute.host1 queues:
    its bootstep registers host1 from libvirt's test:/// driver, as a real worker does."""
    with in_thread_worker():
        yield
