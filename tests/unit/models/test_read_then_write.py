"""``read_then_write``: a request's lookups, then its one write, committed as the block
ends. On SQLite the lookups are a reader's transaction of their own (no write lock held
while they run, a write in them refused); on PostgreSQL they share the writer's one
transaction (one connection checkout, no BEGIN/ROLLBACK of their own). On both, the
write commits only as the block ends and is rolled back when the block raises."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from sqlalchemy import event, text

from models.db import engines_of
from models.read_then_write import read_then_write
from novaq.exceptions import ReadOnlyTransactionError
from tests.unit.models.probe_table import probe_rows

TABLE = PROBE_TABLE = "novaq_read_then_write_probe"  # (the models conftest makes it)


def _rows(url: str) -> list[int]:
    return probe_rows(url, TABLE)


class _Seen:
    """Connection checkouts, COMMITs and ROLLBACKs of an engine."""

    def __init__(self, url: str) -> None:
        self.checkouts = self.commits = self.rollbacks = 0
        # (on SQLite the readers' transactions run on an engine of their own)
        for engine in engines_of(url):
            event.listen(engine, "checkout", self._checkout)
            event.listen(engine, "commit", self._commit)
            event.listen(engine, "rollback", self._rollback)

    def _checkout(self, *_: Any) -> None:
        self.checkouts += 1

    def _commit(self, *_: Any) -> None:
        self.commits += 1

    def _rollback(self, *_: Any) -> None:
        self.rollbacks += 1


def _lookup_then_insert(url: str, n: int) -> None:
    with read_then_write(url) as tx:
        with tx.reading() as session:
            assert session.execute(text(f"SELECT count(*) FROM {TABLE}")).scalar_one() >= 1
        with tx.reading() as session:  # several lookups, as a boot's
            session.execute(text(f"SELECT n FROM {TABLE}")).all()
        tx.writer().execute(text(f"INSERT INTO {TABLE} VALUES ({n})"))


def test_lookups_and_the_write_are_one_transaction_on_postgresql(pg_url: str) -> None:
    _rows(pg_url)  # the pool's first connection, made
    seen = _Seen(pg_url)
    _lookup_then_insert(pg_url, 2)
    assert (seen.checkouts, seen.commits, seen.rollbacks) == (1, 1, 0)
    assert _rows(pg_url) == [1, 2]


def test_lookups_are_a_readers_transaction_on_sqlite(sqlite_url: str) -> None:
    seen = _Seen(sqlite_url)
    _lookup_then_insert(sqlite_url, 2)
    # Two readers' transactions (rolled back), then the writer's.
    assert (seen.commits, seen.rollbacks) == (1, 2)
    assert _rows(sqlite_url) == [1, 2]
    refused = pytest.raises(ReadOnlyTransactionError)
    with refused, read_then_write(sqlite_url) as tx, tx.reading() as session:
        session.execute(text(f"INSERT INTO {TABLE} VALUES (3)"))
    assert _rows(sqlite_url) == [1, 2]


def test_no_write_lock_is_held_during_the_lookups_on_sqlite(sqlite_url: str) -> None:
    path = sqlite_url.removeprefix("sqlite:///")
    with read_then_write(sqlite_url) as tx, tx.reading() as session:
        session.execute(text(f"SELECT n FROM {TABLE}")).all()
        other = sqlite3.connect(path, isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # at once: nobody holds the write lock
            other.execute("ROLLBACK")
        finally:
            other.close()


def test_the_write_commits_only_as_the_block_ends(url: str) -> None:
    with read_then_write(url) as tx:
        with tx.reading() as session:
            session.execute(text(f"SELECT n FROM {TABLE}")).all()
        tx.writer().execute(text(f"INSERT INTO {TABLE} VALUES (2)"))
        assert tx.writer() is tx.writer()  # one write transaction
        assert _rows(url) == [1]  # another connection does not see it yet
    assert _rows(url) == [1, 2]


def test_a_block_that_raises_after_the_write_rolls_it_back(url: str) -> None:
    with pytest.raises(RuntimeError), read_then_write(url) as tx:
        with tx.reading() as session:
            session.execute(text(f"SELECT n FROM {TABLE}")).all()
        tx.writer().execute(text(f"INSERT INTO {TABLE} VALUES (2)"))
        raise RuntimeError("the publish's preparation failed")
    assert _rows(url) == [1]


def test_no_lookup_after_the_write(url: str) -> None:
    with pytest.raises(RuntimeError, match="after writer"), read_then_write(url) as tx:
        tx.writer()
        with tx.reading():
            pass
