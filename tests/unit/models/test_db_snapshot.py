"""``session_scope(url, snapshot=True)``: every statement of the transaction reads the
same committed state, on PostgreSQL (read committed by default) as on SQLite. The audit
reads allocations and servers in one; a delete committed between two of its reads must
not look like a leak."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from models.db import dispose_all, session_scope
from tests.tcp_proxy import reachable

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@pytest.fixture
def pg_table() -> Iterator[str]:
    if not reachable(5432):
        pytest.skip("no PostgreSQL on 127.0.0.1:5432")
    name = "novaq_snapshot_probe"
    engine = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {name}"))
        conn.execute(text(f"CREATE TABLE {name} (n int)"))
        conn.execute(text(f"INSERT INTO {name} VALUES (1)"))
    yield name
    dispose_all()
    with engine.connect() as conn:
        conn.execute(text(f"DROP TABLE IF EXISTS {name}"))
    engine.dispose()


def _commit_elsewhere(table: str) -> None:
    with session_scope(ADMIN) as other:
        other.execute(text(f"INSERT INTO {table} VALUES (2)"))


@pytest.mark.parametrize(("snapshot", "second_read"), [(True, 1), (False, 2)])
def test_a_snapshot_does_not_see_what_commits_meanwhile(
    pg_table: str, snapshot: bool, second_read: int
) -> None:
    with session_scope(ADMIN, snapshot=snapshot) as session:
        first = session.execute(text(f"SELECT count(*) FROM {pg_table}")).scalar_one()
        _commit_elsewhere(pg_table)
        second = session.execute(text(f"SELECT count(*) FROM {pg_table}")).scalar_one()
    assert (first, second) == (1, second_read)
    # The pool gave the connection back at the server's default isolation.
    with session_scope(ADMIN) as session:
        level = session.execute(text("SHOW transaction_isolation")).scalar_one()
    assert level == "read committed"


def test_a_snapshot_on_sqlite_is_an_ordinary_transaction(tmp_path: object) -> None:
    url = f"sqlite:///{tmp_path}/snap.db"
    with session_scope(url, snapshot=True) as session:
        assert session.execute(text("SELECT 1")).scalar_one() == 1
