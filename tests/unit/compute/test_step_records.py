"""The durable record of each step (compute/step_records.py): written in the step's own
transactions, three statements a step (issue 16 counts them), a redelivery counted on the
same row with its new worker, the states before and after read from the instance."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import event, select, update
from sqlalchemy.orm import Session

from compute import step_records
from compute.sessions import sessions_for
from models import Instance, StepOutcome, StepRecord
from models.db import session_scope
from models.states import PowerState, TaskState, VmState
from tests.factories import make_instance


def _start(uuid: str, worker: str = "compute@host1") -> step_records.StepStart:
    return step_records.StepStart(
        task_id="task-1",
        task_name="compute.build_and_run_instance",
        request_id="req-test",
        instance_uuids=(uuid,),
        parent_id="task-0",
        queue="compute.host1",
        worker=worker,
        host="host1",
    )


@contextmanager
def _counting(session: Session) -> Iterator[list[str]]:
    statements: list[str] = []

    def count(conn: object, cursor: object, statement: str, *args: object) -> None:
        statements.append(statement.split()[0].upper())

    connection = session.connection()
    event.listen(connection, "before_cursor_execute", count)
    try:
        yield statements
    finally:
        event.remove(connection, "before_cursor_execute", count)


def _row(db_url: str) -> StepRecord:
    with session_scope(db_url) as session:
        row = session.scalars(select(StepRecord)).one()
        session.expunge(row)
        return row


def test_a_step_costs_two_statements_in_transactions_it_already_has(db_url: str) -> None:
    uuid = make_instance(db_url)
    with session_scope(db_url) as session, _counting(session) as statements:
        step_records.started(session, _start(uuid))
    assert statements == ["INSERT"]
    with session_scope(db_url) as session:
        session.execute(
            update(Instance)
            .where(Instance.uuid == uuid)
            .values(vm_state=VmState.ACTIVE, task_state=None, power_state=PowerState.RUNNING)
        )
    with session_scope(db_url) as session, _counting(session) as statements:
        step_records.ended(session, "task-1", step_records.StepEnd(StepOutcome.SUCCESS, "active"))
    assert statements == ["UPDATE"]
    row = _row(db_url)
    assert (row.queue, row.worker, row.host, row.parent_id) == (
        "compute.host1",
        "compute@host1",
        "host1",
        "task-0",
    )
    assert (row.vm_state_before, row.task_state_before, row.power_state_before) == (
        VmState.BUILDING,
        TaskState.SCHEDULING,
        PowerState.NOSTATE,
    )
    assert (row.vm_state_after, row.task_state_after, row.power_state_after) == (
        VmState.ACTIVE,
        None,
        PowerState.RUNNING,
    )
    assert (row.outcome, row.detail, row.deliveries) == (StepOutcome.SUCCESS, "active", 1)
    assert row.ended_at is not None and row.ended_at >= row.started_at


def test_a_redelivery_counts_on_the_same_row_and_names_its_new_worker(db_url: str) -> None:
    uuid = make_instance(db_url)
    with session_scope(db_url) as session:
        step_records.started(session, _start(uuid, "compute@host1"))
    with session_scope(db_url) as session, _counting(session) as statements:
        step_records.started(session, _start(uuid, "compute@host1-restarted"), redelivered=True)
    assert statements == ["UPDATE"]
    row = _row(db_url)
    assert row.deliveries == 2 and row.worker == "compute@host1-restarted"
    assert [line.split()[0] for line in row.delivery_log.splitlines()] == [
        "compute@host1",
        "compute@host1-restarted",
    ]
    # The states before stay those of the first delivery.
    assert row.task_state_before == TaskState.SCHEDULING


def test_a_step_of_a_multi_create_records_each_instance(db_url: str) -> None:
    uuids = (make_instance(db_url), make_instance(db_url))
    start = step_records.StepStart("task-s", "scheduler.select_destinations", "req-test", uuids)
    with session_scope(db_url) as session:
        step_records.started(session, start)
        step_records.ended(session, "task-s", step_records.StepEnd(StepOutcome.FAILURE, "x"))
    with session_scope(db_url) as session:
        rows = session.scalars(select(StepRecord)).all()
        assert sorted(r.instance_uuid for r in rows) == sorted(uuids)
        assert {r.outcome for r in rows} == {StepOutcome.FAILURE}


def test_a_step_revoked_before_it_ran_has_a_record(db_url: str) -> None:
    uuid = make_instance(db_url)
    end = step_records.StepEnd(StepOutcome.REVOKED, "revoked")
    step_records.record_revoked(sessions_for(db_url), _start(uuid), end)
    row = _row(db_url)
    assert row.outcome == StepOutcome.REVOKED and row.ended_at is not None
    assert row.vm_state_after == VmState.BUILDING


def test_a_copy_delivered_after_its_step_returned_adds_no_second_row(db_url: str) -> None:
    uuid = make_instance(db_url)
    for _ in range(2):
        with session_scope(db_url) as session:
            step_records.started(session, _start(uuid))
    assert _row(db_url).deliveries == 1


def test_a_redelivered_step_of_a_multi_create_counts_on_each_instance_alone(
    db_url: str,
) -> None:
    """Several instances (an expanding ``IN``), as one (``=``): only this step's rows of
    those instances count the redelivery."""
    uuids = (make_instance(db_url), make_instance(db_url))
    lone = make_instance(db_url)
    start = step_records.StepStart("task-s", "scheduler.select_destinations", "req-test", uuids)
    with session_scope(db_url) as session:
        step_records.started(session, start)
        step_records.started(session, _start(lone))
    with session_scope(db_url) as session, _counting(session) as statements:
        step_records.started(session, start, redelivered=True)
    assert statements == ["UPDATE"]
    with session_scope(db_url) as session:
        rows = session.scalars(select(StepRecord)).all()
        assert {r.instance_uuid: r.deliveries for r in rows} == {uuids[0]: 2, uuids[1]: 2, lone: 1}
