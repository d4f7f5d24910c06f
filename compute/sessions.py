"""Where domain code gets its transactions: a ``Sessions`` factory handed in from the edge
(the task wrapper, the periodic or recovery entry point), never a database URL opened
inside the domain.

A ``Sessions`` is a zero-argument callable giving a context manager that yields a
``Session`` and commits on success, rolls back on error (``models.db.session_scope``
bound to one URL in production; a savepoint of one outer transaction in tests, so a
whole step can run inside a transaction the test rolls back).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

from sqlalchemy.orm import Session

from models.db import session_scope

Sessions = Callable[[], AbstractContextManager[Session]]


def sessions_for(db_url: str) -> Sessions:
    """Production's factory: one short ``session_scope`` transaction per call."""
    return functools.partial(session_scope, db_url)


def savepoints(session: Session) -> Sessions:
    """A factory whose every transaction is a SAVEPOINT of ``session``'s transaction:
    committed into it on success, rolled back to the savepoint on error. The caller owns
    the outer transaction (a test rolls it back at the end)."""

    @contextlib.contextmanager
    def scope() -> Iterator[Session]:
        with session.begin_nested():
            yield session

    return scope
