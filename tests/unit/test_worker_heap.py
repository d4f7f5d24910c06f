"""A started worker's heap is out of the cyclic collector's reach (``tasks.celery``)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from celery.signals import worker_ready

import tasks.celery  # noqa: F401  (connects the worker's signal handlers)


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_a_ready_worker_freezes_what_it_holds(unfrozen: None) -> None:
    before = len(gc.get_objects())
    assert gc.get_freeze_count() == 0

    worker_ready.send(sender=None)

    # Every object tracked at start-up is frozen: a full collection no longer walks it.
    assert gc.get_freeze_count() >= before - 100
    assert len(gc.get_objects()) < 100


def test_garbage_made_after_the_freeze_is_still_collected(unfrozen: None) -> None:
    tasks.celery.freeze_start_up_heap()

    class Node:
        other: object = None

    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle only the cyclic collector frees
    del a, b

    assert gc.collect() >= 2
