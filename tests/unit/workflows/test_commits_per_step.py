"""What one boot and one delete cost the database, step by step (issue 16, goal 1), counted
through a real in-thread worker: COMMITs and statements per task, from SQLAlchemy's
engine events, attributed to the task whose thread ran them.

A step's delivery record rides the step's own transactions (``compute.delivery_ledger``):
the build and the terminate are their begin and their finish, and nothing else; the
scheduler step is its claim, which carries its hand-over to the build (its candidates'
read is read-only). With the API's one commit (``test_api_boot_cost``), a boot writes 4
commits: API 1, scheduler 1, build 2. Versioned notifications are switched off here:
what they cost is counted where they are made (``compute.notifications``).

The durable records stay whole: every step has its step record (one delivery, its
outcome), and no delivery row nor operation record is left once the server settled.
"""

from __future__ import annotations

from sqlalchemy import func, select

from compute import notifications
from models import OperationInFlight, StepRecord
from models.db import session_scope
from tests.unit.task_costs import TaskCosts, settled
from tests.unit.workflows.servers import boot_active, delete_and_wait, in_thread_worker
from workflows import api

SCHEDULER, BUILD, TERMINATE = (
    "scheduler.select_destinations",
    "compute.build_and_run_instance",
    "compute.terminate_instance",
)


def _records(db_url: str, uuid: str) -> list[tuple[str, str | None, int]]:
    with session_scope(db_url) as session:
        rows = session.scalars(
            select(StepRecord).where(StepRecord.instance_uuid == uuid).order_by(StepRecord.id)
        ).all()
        assert session.scalar(select(func.count()).select_from(OperationInFlight)) == 0
        return [(r.task_name, r.outcome, r.deliveries) for r in rows]


def test_a_boot_costs_one_commit_to_schedule_and_two_per_host_step(
    db_url: str, task_costs: TaskCosts
) -> None:
    with in_thread_worker():
        warm = boot_active("warm")  # the flavor, the first connections, the caches
        notifications.install(None)
        task_costs.on = True
        uuid = boot_active("counted")
        settled(db_url)
        boot_commits, boot_statements = task_costs.take()
        api.delete(uuid)
        api.wait(uuid, "DELETED", timeout=30)
        settled(db_url)
        delete_commits, delete_statements = task_costs.take()
        task_costs.on = False
        delete_and_wait(warm)  # no guest left behind for the next test
    print(f"\nboot: commits {boot_commits} statements {boot_statements}")
    print(f"delete: commits {delete_commits} statements {delete_statements}")
    assert boot_commits == {SCHEDULER: 1, BUILD: 2}  # claim + hand-over; begin, finish
    assert delete_commits == {TERMINATE: 2}
    # Statements (BEGIN aside): a guard against added round trips.
    assert boot_statements[BUILD] <= 24
    assert boot_statements[SCHEDULER] <= 17
    assert delete_statements[TERMINATE] <= 30
    assert _records(db_url, uuid) == [
        (SCHEDULER, "success", 1),
        (BUILD, "success", 1),
        (TERMINATE, "success", 1),
    ]
