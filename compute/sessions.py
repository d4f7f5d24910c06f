"""Where domain code gets its transactions: a ``Sessions`` factory handed in from the edge
(the task wrapper, the periodic or recovery entry point), never a database URL opened
inside the domain.

A ``Sessions`` is a callable giving a context manager that yields a ``Session`` and
commits on success, rolls back on error (``models.db.session_scope`` bound to one URL in
production; a savepoint of one outer transaction in tests, so a whole step can run inside
a transaction the test rolls back). ``sessions(read_only=True)`` is a reader's
transaction: no write lock on SQLite, ``READ ONLY`` elsewhere, no commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Protocol

from sqlalchemy.orm import Session

from models.db import session_scope


class Sessions(Protocol):
    """A factory of transactions (``sessions()``, or ``sessions(read_only=True)``)."""

    def __call__(self, read_only: bool = False) -> AbstractContextManager[Session]: ...


def sessions_for(db_url: str) -> Sessions:
    """Production's factory: one short ``session_scope`` transaction per call."""
    return _UrlSessions(db_url)


class _UrlSessions:
    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        #: ``reads_in_writer``: a writer's transaction may do a reader's reads too.
        self.reads_in_writer = reads_take_no_locks(db_url)

    def __call__(self, read_only: bool = False) -> AbstractContextManager[Session]:
        return session_scope(self.db_url, read_only=read_only)


def reads_take_no_locks(db_url: str) -> bool:
    """Whether reads in a writer's transaction hold nothing other writers wait for, so
    that reading there costs nothing over a reader's own transaction: PostgreSQL's
    (MVCC: a SELECT takes no row lock). Not SQLite's, whose writer holds the database's
    write lock from its BEGIN."""
    return db_url.split(":", 1)[0].split("+", 1)[0] in ("postgresql", "postgres")


def reads_in_writer(sessions: Sessions) -> bool:
    """``reads_take_no_locks`` for the database of ``sessions`` (False when unknown: the
    tests' savepoints, any other factory)."""
    return bool(getattr(sessions, "reads_in_writer", False))


def savepoints(session: Session) -> Sessions:
    """A factory whose every transaction is a SAVEPOINT of ``session``'s transaction:
    committed into it on success, rolled back to the savepoint on error. The caller owns
    the outer transaction (a test rolls it back at the end). ``read_only`` is accepted
    and ignored: the test's one connection serves readers and writers alike."""

    @contextlib.contextmanager
    def scope(read_only: bool = False) -> Iterator[Session]:
        with session.begin_nested():
            yield session

    return scope
