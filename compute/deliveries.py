"""Count deliveries of each in-flight step; past a limit the step is given up cleanly.

A row exists only while its step is in flight: it is removed when the step returns
(success, failure or replacement), so what stays behind is the trace of a delivery that
died with its worker.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from compute.sessions import Sessions
from models import TaskDelivery, utcnow


def record_delivery(sessions: Sessions, task_id: str, task_name: str) -> int:
    """Count one more delivery of (task_id, task_name); returns the count so far."""
    for _ in range(3):
        try:
            with sessions() as session:
                row = session.scalars(
                    select(TaskDelivery).where(
                        TaskDelivery.task_id == task_id, TaskDelivery.task_name == task_name
                    )
                ).first()
                if row is None:
                    session.add(TaskDelivery(task_id=task_id, task_name=task_name, attempts=1))
                    return 1
                session.execute(
                    update(TaskDelivery)
                    .where(TaskDelivery.id == row.id)
                    .values(attempts=TaskDelivery.attempts + 1, last_at=utcnow())
                )
                return row.attempts + 1
        except IntegrityError:  # two deliveries at once: count again
            continue
    raise RuntimeError(f"could not count the delivery of {task_name}[{task_id}]")


def forget_delivery(sessions: Sessions, task_id: str, task_name: str) -> None:
    with sessions() as session:
        session.execute(
            delete(TaskDelivery).where(
                TaskDelivery.task_id == task_id, TaskDelivery.task_name == task_name
            )
        )
