"""Count deliveries of each in-flight step; past a limit the step is given up cleanly.

A row exists only while its step is in flight: it is removed when the step returns
(success, failure or replacement), so what stays behind is the trace of a delivery that
died with its worker.
"""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError

from compute import in_flight, step_records
from compute.sessions import Sessions
from models import TaskDelivery, utcnow


def record_delivery(
    sessions: Sessions,
    task_id: str,
    task_name: str,
    worker: str | None = None,
    host: str | None = None,
    message: in_flight.Message | None = None,
    step: step_records.StepStart | None = None,
) -> int:
    """Count one more delivery of (task_id, task_name) to ``worker`` (a Celery node) on
    ``host``; returns the count so far. ``message``: the step's own, which becomes its
    operation's record of what runs next (``compute.in_flight``), in the same transaction;
    so does ``step``, the step's durable record (``compute.step_records``)."""
    for _ in range(3):
        try:
            with sessions() as session:
                if message is not None:
                    in_flight.record(session, message)
                row = session.scalars(
                    select(TaskDelivery).where(
                        TaskDelivery.task_id == task_id, TaskDelivery.task_name == task_name
                    )
                ).first()
                if step is not None:
                    step_records.started(session, step, redelivered=row is not None)
                if row is None:
                    session.add(
                        TaskDelivery(
                            task_id=task_id,
                            task_name=task_name,
                            attempts=1,
                            worker=worker,
                            host=host,
                        )
                    )
                    return 1
                session.execute(
                    update(TaskDelivery)
                    .where(TaskDelivery.id == row.id)
                    .values(
                        attempts=TaskDelivery.attempts + 1,
                        last_at=utcnow(),
                        worker=worker,
                        host=host,
                        orphaned_at=None,
                    )
                )
                return row.attempts + 1
        except IntegrityError:  # two deliveries at once: count again
            continue
    raise RuntimeError(f"could not count the delivery of {task_name}[{task_id}]")


def forget_delivery(
    sessions: Sessions,
    task_id: str,
    task_name: str,
    succeeded: bool = False,
    successor: in_flight.Message | None = None,
    end: step_records.StepEnd | None = None,
) -> None:
    """The step returned. When it ``succeeded``, its operation's record passes to
    ``successor`` (the chain's next step) or goes; a failed step leaves the record to
    the errback's undo (the reaper drops it once the instance left the operation's
    task_state, or sends the step again if the undo could not run). ``end``: how the
    step ended, for its durable record (``compute.step_records``)."""
    with sessions() as session:
        if succeeded:
            in_flight.step_ended(session, task_id, successor)
        if end is not None:  # (rows in the order a step's start writes them)
            step_records.ended(session, task_id, end)
        session.execute(
            delete(TaskDelivery).where(
                TaskDelivery.task_id == task_id, TaskDelivery.task_name == task_name
            )
        )
