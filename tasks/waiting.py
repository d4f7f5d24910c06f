"""Waiting for the database at the start of a worker or of beat, as nova-compute waits for
its conductor ("Timed out waiting for nova-conductor ... retrying"): a process that
starts while the database refuses connections stays up, says so once, retries with
backoff, and goes on when the database answers, instead of dying.

Only errors that mean "the database is not there (yet)" are waited for: novaq's
``ServiceUnavailable`` and SQLAlchemy's ``OperationalError``/``InterfaceError`` (refused
or dropped connections, "the database system is starting up", "database does not
exist"). Anything else is a bug or a bad setting and is raised at once.

The sleep between attempts is cut in short slices and calls ``should_stop`` between
them, so that a worker's warm shutdown (Celery's ``state.maybe_shutdown``) ends the wait
within a fraction of a second.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import InterfaceError, OperationalError
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential

from novaq.exceptions import ServiceUnavailable

LOG = logging.getLogger(__name__)

T = TypeVar("T")

#: The longest pause between two attempts, and how often a wait that goes on is logged.
MAX_WAIT_S = 10.0
REMIND_EVERY_S = 60.0
_SLICE_S = 0.2


def database_unreachable(exc: BaseException) -> bool:
    """True for an error that a database coming back would cure."""
    return isinstance(exc, ServiceUnavailable | OperationalError | InterfaceError)


def _never_stop() -> None:
    return None


class _Reporter:
    """One warning when the wait starts, a reminder every ``REMIND_EVERY_S``, one line
    when it ends: a log that says what is waited for without a traceback per attempt."""

    def __init__(self, what: str, logger: logging.Logger) -> None:
        self.what, self.log = what, logger
        self.started: float | None = None
        self._reminded = 0.0

    def failed(self, state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        now = time.monotonic()
        reason = _one_line(exc)
        if self.started is None:
            self.started = self._reminded = now
            self.log.warning(
                "%s: the database is unreachable (%s); waiting for it, retrying every %g s at most",
                self.what,
                reason,
                MAX_WAIT_S,
            )
        elif now - self._reminded >= REMIND_EVERY_S:
            self._reminded = now
            self.log.warning(
                "%s: still waiting for the database after %.0f s (%d attempts): %s",
                self.what,
                now - self.started,
                state.attempt_number,
                reason,
            )

    def done(self) -> None:
        if self.started is not None:
            self.log.warning(
                "%s: the database answered after %.0f s; going on",
                self.what,
                time.monotonic() - self.started,
            )


def _one_line(exc: BaseException | None) -> str:
    text = str(exc) if exc is not None else "unknown error"
    return " ".join(text.split())[:300]


def until_database_answers(
    what: str,
    fn: Callable[[], T],
    *,
    should_stop: Callable[[], None] = _never_stop,
    max_wait_s: float = MAX_WAIT_S,
    logger: logging.Logger = LOG,
) -> T:
    """``fn()``, called again with exponential backoff (0.5 s doubling up to
    ``max_wait_s``) for as long as it fails because the database is unreachable.

    ``should_stop`` is called between slices of each pause; it raises to end the wait
    (a worker passes ``celery.worker.state.maybe_shutdown``).
    """
    reporter = _Reporter(what, logger)

    def sleep(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            should_stop()
            time.sleep(min(_SLICE_S, left))
        should_stop()

    retrying = Retrying(
        retry=retry_if_exception(database_unreachable),
        wait=wait_exponential(multiplier=0.5, max=max_wait_s),
        sleep=sleep,
        before_sleep=reporter.failed,
        reraise=True,
    )
    result = retrying(fn)
    reporter.done()
    return result
