"""Riding out a database outage: a unit of work declares how long it may wait for the
database, and inside it database work waits instead of failing.

A worker runs each task delivery and each error callback inside ``tolerating(patience)``
(``tasks.base.NovaqTask``): until the budget's deadline, ``models.db.session_scope``
waits for the database before it starts a transaction, and ``ride_out(fn)`` calls ``fn``
again after a ``DatabaseUnavailable`` (a transaction cut mid-way was rolled back, so
``fn`` starts over from the database's last committed state), with exponential backoff.
Every wait inside one budget shares its deadline, so nested waits never add up.

Outside any budget (the public API, the command line, a heartbeat) nothing waits: the
caller gets ``DatabaseUnavailable`` at once, as Nova's API answers 503.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception_type

from novaq.exceptions import DatabaseUnavailable
from novaq.retrying import after_first_try

LOG = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Patience:
    """How long to wait for the database (``[database] outage_tolerance_s``) and how
    often to try it meanwhile (``db_retry_interval`` doubling up to
    ``db_max_retry_interval``), in seconds."""

    tolerance_s: float
    first_wait_s: float = 1.0
    max_wait_s: float = 10.0


@dataclass(frozen=True, slots=True)
class _Budget:
    patience: Patience
    deadline: float  # time.monotonic()
    owner: str  # the unit of work, for the log (a task's name and id)

    def remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


# NOTE: a context variable, not an argument: the budget belongs to the unit of work (the
# task delivery), while the waits happen deep below it, in every transaction the domain
# opens through its Sessions factory. Each worker thread (and each Celery task call) has
# its own context, so one task's budget never leaks into another's.
_BUDGET: ContextVar[_Budget | None] = ContextVar("novaq_database_outage_budget", default=None)


@contextlib.contextmanager
def tolerating(patience: Patience, owner: str = "") -> Iterator[None]:
    """Within the block, database work waits up to ``patience.tolerance_s`` from now for
    the database (``owner`` names the work in the log). A nested block has a budget of
    its own; the outer one is back on exit."""
    budget = _Budget(patience, time.monotonic() + patience.tolerance_s, owner)
    token = _BUDGET.set(budget)
    try:
        yield
    finally:
        _BUDGET.reset(token)


@contextlib.contextmanager
def renewed() -> Iterator[None]:
    """The current patience again, from now: for the undo a step must still run once the
    database answers, after the step's own budget is spent. Nothing outside a budget."""
    budget = _BUDGET.get()
    if budget is None:
        yield
        return
    with tolerating(budget.patience, budget.owner):
        yield


def remaining_s() -> float:
    """Seconds left to wait in the current budget (0 outside one)."""
    budget = _BUDGET.get()
    return budget.remaining_s() if budget is not None else 0.0


def ride_out(fn: Callable[[], T], what: str) -> T:
    """``fn()``, called again after each ``DatabaseUnavailable`` until the budget's
    deadline (outside a budget: once); the last error is raised. ``fn`` must be safe to
    run again after it raised it: one transaction (rolled back), or work whose every
    transaction checks the state it moves (a step's begin, its finish, an undo).

    The waits double from ``first_wait_s`` up to ``max_wait_s``, and the last one lands
    on the deadline, not past it; each is logged with the error that caused it.

    NOTE: the first try is a plain call, and the ``tenacity.Retrying`` built only after
    it failed: every transaction of every task comes through here
    (``models.db.session_scope``), building a ``Retrying`` per call cost more CPU than
    the transaction's own Python, and the database almost always answers the first try."""
    budget = _BUDGET.get()
    if budget is None or budget.remaining_s() <= 0:
        return fn()
    try:
        return fn()
    except DatabaseUnavailable as exc:
        first = exc
    return after_first_try(_retrying(budget, what), first, fn)


def _retrying(budget: _Budget, what: str) -> Retrying:
    """Tries of ``what`` after a ``DatabaseUnavailable`` until ``budget``'s deadline."""

    def wait(state: RetryCallState) -> float:
        return min(_backoff_s(budget.patience, state.attempt_number), budget.remaining_s())

    def log(state: RetryCallState) -> None:
        LOG.warning(
            "%s%s: %s; trying again in %.1f s (waiting at most %.0f s more)",
            f"{budget.owner}: " if budget.owner else "",
            what,
            state.outcome.exception() if state.outcome is not None else None,
            state.upcoming_sleep,
            budget.remaining_s(),
        )

    return Retrying(
        retry=retry_if_exception_type(DatabaseUnavailable),
        stop=lambda state: budget.remaining_s() <= 0,
        wait=wait,
        before_sleep=log,
        reraise=True,
    )


def _backoff_s(patience: Patience, attempt: int) -> float:
    """The wait after failed try number ``attempt`` (1, 2, ...): ``first_wait_s``
    doubled each time, at most ``max_wait_s`` (tenacity's ``wait_exponential``)."""
    try:
        wait: float = patience.first_wait_s * 2 ** (attempt - 1)
    except OverflowError:
        return patience.max_wait_s
    return max(0.0, min(wait, patience.max_wait_s))
