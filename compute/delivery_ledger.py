"""A step's delivery record written in the step's own transactions (issue 16): no
transaction of its own for a delivery's start nor, when the step ends its workflow, for
its end.

A task call (``tasks.base.NovaqTask``) opens a ``Ledger`` for its delivery: the start
writes (``compute.deliveries.write_start``: the operation's record, the step record, the
count) and, for a step whose task said what it returns when done, the end writes. The
step's transactions carry them:

- the start rides the step's first write transaction: ``run_step``'s begin (which locks
  the instance, before anything on the hypervisor) or the scheduler's first transaction
  (``riding``); a delivery counted past the limit raises ``DeliveryLimitExceeded`` there,
  so that transaction, the step's first change, rolls back;
- the end rides the finish of a step that is ``done`` (``run_step``'s finish) when the
  step has no successor in its chain: once that finish has committed, nothing the step
  does later decides what runs next (a later failure only corrects the step record);
- the end of a step that replaces itself (its hand-over: the record passed to the
  replacement) rides the step's last write when that write decides the replacement (the
  scheduler's last claim, ``hand_over``): the replacement is published once it has
  committed, exactly as after a hand-over of its own, so a publish that fails leaves
  the record naming the replacement for the reaper to send again.

What no transaction carried (a step that failed or was skipped before its first write,
one that did not finish ``done``) the task writes as today, as the step returns.

Why the count may wait for the first write: before it, a step has changed nothing, so a
worker that dies there is a message not yet consumed. Its copy comes back marked
``redelivered`` by the broker (kombu's Redis transport marks every restored message;
RabbitMQ marks every requeued one), and a redelivered step counts itself in a
transaction of its own before it runs, counting the uncounted death too (``Delivery.
redelivered``): a message that kills its worker before its first write is still given up
after ``max_delivery_attempts``. Copies the reaper sends again are bounded by
``operation_max_resends``. What is lost is only the reaper's shortcut for a worker killed
in that window (``in_flight.orphan_deliveries`` finds no row naming it): its step comes
back when the broker restores it (at once on RabbitMQ, after the visibility timeout on
Redis) or the reaper finds it lost (``operation_lost_after``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from sqlalchemy.orm import Session

from compute.deliveries import Delivery, Ending, write_end, write_start
from compute.sessions import Sessions, reads_in_writer
from novaq.exceptions import NovaqError


class DeliveryLimitExceeded(NovaqError):
    msg_fmt = "%(task)s was delivered %(attempts)s times (limit %(limit)s); giving up"


@dataclass(slots=True)
class Ledger:
    """One task call's delivery: what its start and end write, and what has committed."""

    delivery: Delivery
    #: ``[celery] max_delivery_attempts``.
    limit: int
    #: The end a ``done`` finish writes (None: the task writes its end as it returns).
    done: Ending | None = None
    started: bool = False
    ended: bool = False
    #: A transaction carrying the start (or end) is open: no other may write it too.
    _starting: bool = False
    _ending: bool = False
    #: A hand-over written in the transaction open now (``hand_over``), not yet committed.
    _handing_over: bool = False

    def check(self, attempts: int) -> None:
        if attempts > self.limit:
            raise DeliveryLimitExceeded(
                task=self.delivery.task_name, attempts=attempts, limit=self.limit
            )


_current: ContextVar[Ledger | None] = ContextVar("novaq_delivery_ledger", default=None)


@contextlib.contextmanager
def open_for(ledger: Ledger | None) -> Iterator[None]:
    """The ledger of the task call running in this context (None: nothing to carry)."""
    token = _current.set(ledger)
    try:
        yield
    finally:
        _current.reset(token)


Ride = Callable[[Session], None]


@contextlib.contextmanager
def start_riding() -> Iterator[Ride]:
    """Around a transaction that may carry the start: call the yielded function with its
    session (before the step changes anything, so the step record reads the states
    before). The start counts as written once the block (and so the transaction) ended
    without an error."""
    ledger = _current.get()
    wrote = False

    def ride(session: Session) -> None:
        nonlocal wrote
        if ledger is None or ledger.started or ledger._starting:
            return
        ledger._starting = wrote = True
        ledger.check(write_start(session, ledger.delivery))

    try:
        yield ride
    except BaseException:
        if wrote and ledger is not None:
            ledger._starting = False
        raise
    if wrote and ledger is not None:
        ledger._starting, ledger.started = False, True


@contextlib.contextmanager
def end_riding() -> Iterator[Ride]:
    """Around the finish of a ``done`` step: call the yielded function with its session,
    in each try of it, last. Written once the block ended without an error."""
    ledger = _current.get()
    wrote = False

    def ride(session: Session) -> None:
        nonlocal wrote
        if ledger is None or ledger.done is None or not ledger.started or ledger.ended:
            return
        delivery = ledger.delivery
        write_end(session, delivery.task_id, delivery.task_name, ledger.done)
        wrote = True

    yield ride
    if wrote and ledger is not None:
        ledger.ended = True


def hand_over(session: Session, ending: Ending) -> bool:
    """The end of a step that replaces itself, in the caller's transaction (one of
    ``riding``'s, after the start): its record passes to ``ending.successor``, its step
    record ends, its count goes. Counts as written once that transaction committed.
    False (nothing written) when no ledger can carry it: the task then writes its
    hand-over as it replaces itself."""
    ledger = _current.get()
    if ledger is None or ledger.ended or not (ledger.started or ledger._starting):
        return False
    delivery = ledger.delivery
    write_end(session, delivery.task_id, delivery.task_name, ending)
    ledger._handing_over = True
    return True


def riding(sessions: Sessions) -> Sessions:
    """``sessions`` whose first write transaction that commits carries the start (the
    scheduler's: its transactions are the scheduler's own), and any hand-over written in
    them (``hand_over``). A read-only one carries nothing: it ends without a commit."""

    @contextlib.contextmanager
    def scope(read_only: bool = False) -> Iterator[Session]:
        ledger = _current.get()
        try:
            with start_riding() as ride, sessions(read_only=read_only) as session:
                if not read_only:
                    ride(session)
                yield session
        except BaseException:
            if ledger is not None:
                ledger._handing_over = False
            raise
        if ledger is not None and ledger._handing_over:
            ledger._handing_over, ledger.ended = False, True

    scope.reads_in_writer = reads_in_writer(sessions)  # type: ignore[attr-defined]
    return scope
