"""What one terminate costs the database (issue 16, goal 1): its statements and its
commits, counted through a real in-thread worker, attributed to the task whose thread ran
them. The instance-action event opens and closes with plain INSERT / UPDATE statements,
and ``release`` finds what the instance holds in one query and rewrites the node's
usage in one more; the finish's read of the row says whether a move is to be dropped.

The durable records stay whole: the event closes ``Success`` with its action, the
allocations are gone and the step record says ``success`` after one delivery.
"""

from __future__ import annotations

from sqlalchemy import func, select

from compute import notifications
from models import (
    Allocation,
    InstanceAction,
    InstanceActionEvent,
    StepRecord,
)
from models.db import session_scope
from tests.unit.task_costs import TaskCosts, settled
from tests.unit.workflows.servers import boot_active, delete_and_wait, in_thread_worker
from workflows import api

TERMINATE = "compute.terminate_instance"


def _terminated(db_url: str, uuid: str) -> None:
    """Start of the terminate's records: event Success, action finished, nothing held."""
    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction).where(
                InstanceAction.instance_uuid == uuid, InstanceAction.action == "delete"
            )
        ).one()
        [event_] = session.scalars(
            select(InstanceActionEvent).where(InstanceActionEvent.action_id == action.id)
        ).all()
        assert (event_.event, event_.result, event_.host) == (
            "compute_terminate_instance",
            "Success",
            "host1",
        )
        assert event_.finish_time is not None and action.finish_time is not None
        held = select(func.count()).select_from(Allocation).where(Allocation.consumer_uuid == uuid)
        assert session.scalar(held) == 0
        record = session.scalars(
            select(StepRecord).where(
                StepRecord.instance_uuid == uuid, StepRecord.task_name == TERMINATE
            )
        ).one()
        assert (record.outcome, record.deliveries) == ("success", 1)


def test_a_terminate_is_two_commits_of_at_most_15_statements(
    db_url: str, task_costs: TaskCosts
) -> None:
    with in_thread_worker():
        warm = boot_active("warm")  # the flavor, the first connections, the caches
        uuid = boot_active("counted")
        notifications.install(None)  # what they cost is counted in compute.notifications
        settled(db_url)
        task_costs.on = True
        api.delete(uuid)
        api.wait(uuid, "DELETED", timeout=30)
        settled(db_url)
        task_costs.on = False
        delete_and_wait(warm)
    print("\n" + "\n".join(s.split("\n")[0][:120] for s in task_costs.statements[TERMINATE]))
    assert task_costs.commits[TERMINATE] == 2  # begin (event open, delivery start), finish
    # 25 before its event and release were trimmed, 17 before the release's usage was
    # summed by its compare-and-swap, 16 before the finish's row said whether the server
    # has a move to drop (``compute.instance_row``: ``moving``)
    assert len(task_costs.statements[TERMINATE]) <= 15
    _terminated(db_url, uuid)
