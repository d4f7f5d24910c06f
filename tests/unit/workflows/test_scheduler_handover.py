"""The scheduler step's hand-over to the build (``tasks.base.NovaqTask.handing_over``),
through a real in-thread worker: it commits with the boot's claim, and a build whose
publish then fails is covered exactly as after a hand-over of its own: the operation's
record names the build for the reaper, no delivery is left counted, the step record says
the step failed, and the boot's error callback undoes the boot."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from celery.canvas import Signature
from kombu.exceptions import OperationalError
from sqlalchemy import select

from compute import in_flight
from models import OperationInFlight, StepRecord, TaskDelivery
from models.db import session_scope
from tests.unit.workflows.servers import (
    boot_active,
    clear_queues,
    delete_and_wait,
    in_thread_worker,
)
from workflows import api

SCHEDULER, BUILD = "scheduler.select_destinations", "compute.build_and_run_instance"


@contextlib.contextmanager
def _build_publish_failing(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every publish of a build fails (a broker that went away after the claim); yields
    the task ids of the builds whose publish failed."""
    failed: list[str] = []
    publish = Signature.apply_async

    def apply_async(self: Signature, *args: Any, **kwargs: Any) -> Any:
        if self.task == BUILD:
            failed.append(str(self.id))
            raise OperationalError("the broker went away")
        return publish(self, *args, **kwargs)

    monkeypatch.setattr(Signature, "apply_async", apply_async)
    yield failed


def _rows(db_url: str) -> tuple[list[OperationInFlight], list[TaskDelivery], list[StepRecord]]:
    with session_scope(db_url) as session:
        records = list(session.scalars(select(OperationInFlight)))
        deliveries = list(session.scalars(select(TaskDelivery)))
        steps = list(session.scalars(select(StepRecord).order_by(StepRecord.id)))
        session.expunge_all()
        return records, deliveries, steps


def test_a_build_whose_publish_failed_after_the_hand_over_is_left_to_the_reaper_and_undone(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with in_thread_worker():
        api.create_flavor("m1", 1, 512, 1)
        with _build_publish_failing(monkeypatch) as failed:
            [uuid] = api.boot("vm", "m1", "cirros")
            api.wait(uuid, "ERROR", timeout=30)
    [build_id] = failed
    records, deliveries, steps = _rows(db_url)
    assert deliveries == []
    # The record passed to the build with the claim: the reaper finds it stale once the
    # error callback has undone the boot (or sends the build again if it could not).
    [record] = records
    assert in_flight.task_id_of(record.message) == build_id
    assert in_flight.first_task(record.message["signature"])["task"] == BUILD
    [step] = steps
    assert (step.task_name, step.outcome, step.deliveries) == (SCHEDULER, "failure", 1)
    server = api.show(uuid)
    assert (server["status"], server["task_state"]) == ("ERROR", None)
    clear_queues("scheduler", "compute.host1")


def test_a_boot_hands_over_to_the_build_it_claimed_for(db_url: str) -> None:
    with in_thread_worker():
        uuid = boot_active()
        records, deliveries, steps = _rows(db_url)
        assert records == [] and deliveries == []
        scheduler, build = steps
        assert (scheduler.task_name, scheduler.outcome) == (SCHEDULER, "success")
        assert scheduler.detail == f"handed over to {build.task_id}"
        assert (build.task_name, build.outcome, build.parent_id) == (
            BUILD,
            "success",
            scheduler.task_id,
        )
        delete_and_wait(uuid)
