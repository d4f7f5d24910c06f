"""A request that looks things up, then writes: as few transactions as the database allows.

``read_then_write(url)`` gives the request ``reading()`` blocks for its lookups, then
``writer()``, the session of its one write, committed when the whole block ends
(``session_scope``'s commit, or its rollback when anything in the block raised).

- SQLite: two transactions, a reader's and a writer's, as the request would open them
  itself: a reader's deferred BEGIN takes no lock, whereas the writer's BEGIN IMMEDIATE
  takes the database's one write lock, which lookups (and whatever the request does
  between them and its write: validation, the broker check) must not hold.
- PostgreSQL: one transaction serves both, committed as the block ends. Its default
  isolation (read committed) gives each statement its own committed view in a reader's
  transaction just as in a writer's, and a writer takes no lock until it writes, so
  sharing the transaction changes nothing the lookups see; it saves the reader's
  connection checkout (the pool's ping), its BEGIN and its ROLLBACK, three round trips,
  and a session's set-up and close. What it gives up: the lookups are no longer READ ONLY
  there, so a lookup that wrote by mistake would be committed with the write rather than
  refused; SQLite, where the unit tier runs every lookup, still refuses it
  (``ReadOnlyTransactionError``). (MySQL/MariaDB keep two transactions: their default
  isolation is repeatable read, where the lookups would fix the writer's snapshot.)

Either way the write, and anything the caller writes with it (the operation's record in
flight), commits or rolls back as one, when the block ends: a publish that must follow
the commit goes after the block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sqlalchemy.orm import Session

from models.db import get_engine, session_scope

#: The dialects whose lookups run in the writer's transaction (see the module docstring).
_SHARED_DIALECTS = frozenset({"postgresql"})


class ReadThenWrite:
    """The two parts of a request: ``reading()`` blocks (any number, before the write),
    then ``writer()``, the session of its one write."""

    def __init__(self, url: str, shared: Session | None, stack: contextlib.ExitStack) -> None:
        self._url = url
        self._shared = shared
        self._stack = stack
        self._writer: Session | None = None

    @contextlib.contextmanager
    def reading(self) -> Iterator[Session]:
        """A session for lookups (on SQLite a read-only transaction of its own)."""
        if self._writer is not None:
            raise RuntimeError("reading() after writer(): read in the writer's session")
        if self._shared is not None:
            yield self._shared
            return
        with session_scope(self._url, read_only=True) as session:
            yield session

    def writer(self) -> Session:
        """The session of the request's write, committed as ``read_then_write``'s block
        ends (rolled back if it raises)."""
        if self._writer is None:
            self._writer = self._shared or self._stack.enter_context(session_scope(self._url))
        return self._writer


@contextlib.contextmanager
def read_then_write(url: str) -> Iterator[ReadThenWrite]:
    """Lookups, then one write, committed when the block ends (see the module docstring)."""
    with contextlib.ExitStack() as stack:
        shared = None
        if get_engine(url).dialect.name in _SHARED_DIALECTS:
            shared = stack.enter_context(session_scope(url))
        yield ReadThenWrite(url, shared, stack)


__all__ = ["ReadThenWrite", "read_then_write"]
