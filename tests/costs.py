"""What a call costs, counted (issue 16's tests count, never time): the SQL statements and
commits an engine runs, and the broker connections kombu establishes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from kombu.connection import Connection
from sqlalchemy import event

from models.db import engines_of


class Sql:
    """The statements (their first two words, upper case) and the COMMITs and ROLLBACKs
    of an engine's connections."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.commits = self.rollbacks = 0

    def reset(self) -> None:
        self.statements.clear()
        self.commits = self.rollbacks = 0

    def _statement(self, _conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        self.statements.append(" ".join(sql.split()[:2]).upper())

    def _commit(self, _conn: Any) -> None:
        self.commits += 1

    def _rollback(self, _conn: Any) -> None:
        self.rollbacks += 1


@contextlib.contextmanager
def listening(db_url: str, listeners: Sequence[tuple[str, Callable[..., Any]]]) -> Iterator[None]:
    """``listeners`` (an engine event's name, its function) on ``db_url``'s engines while
    the block runs: the writers' and, on SQLite, the read-only sessions' own
    (``models.db.reader_engine``)."""
    engines = engines_of(db_url)
    for engine in engines:
        for name, fn in listeners:
            event.listen(engine, name, fn)
    try:
        yield
    finally:
        for engine in engines:
            for name, fn in listeners:
                event.remove(engine, name, fn)


@contextlib.contextmanager
def counting_sql(db_url: str) -> Iterator[Sql]:
    """What ``db_url``'s engines run while the block runs (``listening``)."""
    seen = Sql()
    listeners = (
        ("before_cursor_execute", seen._statement),
        ("commit", seen._commit),
        ("rollback", seen._rollback),
    )
    with listening(db_url, listeners):
        yield seen


def count_broker_connections(monkeypatch: pytest.MonkeyPatch) -> list[Connection]:
    """Every broker connection kombu establishes from now on (the list grows)."""
    opened: list[Connection] = []
    real = Connection._establish_connection

    def establish(self: Connection) -> Any:
        opened.append(self)
        return real(self)

    monkeypatch.setattr(Connection, "_establish_connection", establish)
    return opened
