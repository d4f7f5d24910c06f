"""A delivery's record carried by a step's own transactions (``compute.delivery_ledger``):
written once, counted as written only once its transaction committed, given up past the
limit inside that transaction; a copy the broker marks redelivered counts the delivery
that died before it could count itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select, update

from compute import delivery_ledger
from compute.deliveries import Delivery, Ending, record_delivery
from compute.delivery_ledger import DeliveryLimitExceeded, Ledger
from compute.sessions import Sessions, sessions_for
from compute.step_records import StepEnd, StepStart
from models import Instance, StepOutcome, StepRecord, TaskDelivery
from models.db import session_scope
from tests.factories import make_instance

TASK = "compute.build_and_run_instance"


@pytest.fixture
def sessions(db_url: str) -> Sessions:
    return sessions_for(db_url)


@pytest.fixture
def uuid(db_url: str) -> str:
    return make_instance(db_url, host="host1", node="host1")


def _delivery(uuid: str, task_id: str = "t-1", redelivered: bool = False) -> Delivery:
    step = StepStart(task_id, TASK, "req-test", (uuid,), worker="compute@host1", host="host1")
    return Delivery(task_id, TASK, "compute@host1", "host1", step=step, redelivered=redelivered)


def _counted(db_url: str, task_id: str = "t-1") -> tuple[int | None, int | None]:
    """(the delivery row's count, the step record's deliveries)."""
    with session_scope(db_url) as session:
        attempts = session.scalar(
            select(TaskDelivery.attempts).where(TaskDelivery.task_id == task_id)
        )
        deliveries = session.scalar(
            select(StepRecord.deliveries).where(StepRecord.task_id == task_id)
        )
        return attempts, deliveries


@pytest.fixture
def ledger(uuid: str) -> Iterator[Ledger]:
    opened = Ledger(_delivery(uuid), limit=3)
    with delivery_ledger.open_for(opened):
        yield opened


def test_a_delivery_counts_once_then_once_more_when_delivered_again(
    db_url: str, sessions: Sessions, uuid: str
) -> None:
    assert record_delivery(sessions, _delivery(uuid)) == 1
    assert _counted(db_url) == (1, 1)
    assert record_delivery(sessions, _delivery(uuid, redelivered=True)) == 2
    assert _counted(db_url) == (2, 2)


def test_a_redelivered_copy_with_no_count_counts_the_delivery_that_died_uncounted(
    db_url: str, sessions: Sessions, uuid: str
) -> None:
    assert record_delivery(sessions, _delivery(uuid, redelivered=True)) == 2


def test_the_start_rides_the_transaction_and_is_written_once(
    db_url: str, sessions: Sessions, uuid: str, ledger: Ledger
) -> None:
    with delivery_ledger.start_riding() as ride, sessions() as session:
        ride(session)
        ride(session)
        assert not ledger.started  # not before the transaction committed
    assert ledger.started
    with delivery_ledger.start_riding() as ride, sessions() as session:
        ride(session)  # written already: nothing
    assert _counted(db_url) == (1, 1)


def test_a_start_whose_transaction_rolled_back_rides_the_next_one(
    db_url: str, sessions: Sessions, uuid: str, ledger: Ledger
) -> None:
    failing = pytest.raises(RuntimeError)
    with failing, delivery_ledger.start_riding() as ride, sessions() as session:
        ride(session)
        raise RuntimeError("the step's first transaction failed")
    assert not ledger.started and _counted(db_url) == (None, None)
    with delivery_ledger.riding(sessions)() as session:
        session.execute(update(Instance).values(display_name="changed"))
    assert ledger.started and _counted(db_url) == (1, 1)


def test_past_the_limit_the_carrying_transaction_is_given_up_whole(
    db_url: str, sessions: Sessions, uuid: str, ledger: Ledger
) -> None:
    with session_scope(db_url) as session:
        session.add(TaskDelivery(task_id="t-1", task_name=TASK, attempts=3))
    given_up = pytest.raises(DeliveryLimitExceeded, match="delivered 4 times")
    with given_up, delivery_ledger.start_riding() as ride, sessions() as session:
        session.execute(update(Instance).values(display_name="changed"))
        ride(session)
    with session_scope(db_url) as session:
        assert session.scalar(select(Instance.display_name)) != "changed"
    assert not ledger.started and _counted(db_url) == (3, None)


def test_a_read_only_transaction_carries_nothing(
    db_url: str, sessions: Sessions, uuid: str, ledger: Ledger
) -> None:
    def read_only_capable(**options: object) -> object:
        return sessions()

    with delivery_ledger.riding(read_only_capable)(read_only=True):  # type: ignore[arg-type]
        pass
    assert not ledger.started and _counted(db_url) == (None, None)


def test_without_a_ledger_nothing_rides(db_url: str, sessions: Sessions, uuid: str) -> None:
    with delivery_ledger.start_riding() as ride, sessions() as session:
        ride(session)
    with delivery_ledger.end_riding() as ride, sessions() as session:
        ride(session)
    assert _counted(db_url) == (None, None)


def _handed_over() -> Ending:
    return Ending(succeeded=True, end=StepEnd(StepOutcome.SUCCESS, "handed over to t-2"))


def test_a_hand_over_rides_with_the_start_and_counts_once_its_transaction_committed(
    db_url: str, sessions: Sessions, uuid: str, ledger: Ledger
) -> None:
    failing = pytest.raises(RuntimeError)
    with failing, delivery_ledger.riding(sessions)() as session:
        assert delivery_ledger.hand_over(session, _handed_over())
        raise RuntimeError("the last claim's transaction failed")
    assert not (ledger.started or ledger.ended) and _counted(db_url) == (None, None)
    with delivery_ledger.riding(sessions)() as session:
        assert delivery_ledger.hand_over(session, _handed_over())
        assert not ledger.ended  # not before the transaction committed
    assert ledger.started and ledger.ended
    with session_scope(db_url) as session:
        step = session.scalars(select(StepRecord)).one()
        assert (step.outcome, step.detail, step.deliveries) == ("success", "handed over to t-2", 1)
    assert _counted(db_url) == (None, 1)  # counted, then the count removed


def test_a_hand_over_with_no_ledger_or_once_ended_writes_nothing(
    db_url: str, sessions: Sessions, uuid: str
) -> None:
    with sessions() as session:
        assert not delivery_ledger.hand_over(session, _handed_over())
    ended = Ledger(_delivery(uuid), limit=3, started=True, ended=True)
    with delivery_ledger.open_for(ended), sessions() as session:
        assert not delivery_ledger.hand_over(session, _handed_over())
    assert _counted(db_url) == (None, None)
