"""A pooled PostgreSQL connection is pinged at checkout unless it was in use a moment ago
and the server has not closed it since (``models.db._ping_unless_just_used``): a
connection the server or the network closed is still replaced before the transaction
uses it, as ``pool_pre_ping`` did, without a round trip per transaction otherwise."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import text

from models import db
from models.db import dispose_all, get_engine, session_scope
from tests.tcp_proxy import TcpProxy, reachable

needs_pg = pytest.mark.skipif(not reachable(5432), reason="no PostgreSQL on 127.0.0.1:5432")


class _Pings:
    """The pings of one engine's dialect (results as the dialect's)."""

    def __init__(self, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        dialect = get_engine(url).dialect
        ping = dialect.do_ping

        def counted(dbapi_connection: object) -> bool:
            self.count += 1
            return ping(dbapi_connection)

        monkeypatch.setattr(dialect, "do_ping", counted)


def _select(url: str, value: int) -> int:
    with session_scope(url) as session:
        return int(session.execute(text(f"SELECT {value}")).scalar_one())


@needs_pg
def test_a_connection_just_used_is_not_pinged_one_idle_is(
    proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
    pings = _Pings(url, monkeypatch)
    assert _select(url, 1) == 1  # a new connection: no ping (as pool_pre_ping)
    for n in range(2, 6):
        assert _select(url, n) == n
    assert pings.count == 0
    monkeypatch.setattr(db, "_PING_AFTER_IDLE_S", 0.05)
    time.sleep(0.1)
    assert _select(url, 6) == 6
    assert pings.count == 1


@needs_pg
def test_a_connection_cut_right_after_use_is_replaced_before_the_next_transaction(
    proxy: TcpProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
    pings = _Pings(url, monkeypatch)
    assert _select(url, 1) == 1
    proxy.cut()  # the pooled connection's socket is closed: EOF to read
    assert _select(url, 2) == 2  # pinged, found dead, replaced: no error
    assert pings.count == 1


@needs_pg
def test_a_backend_terminated_right_after_use_is_replaced_before_the_next_transaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = "postgresql://postgres@127.0.0.1:5432/test"
    try:
        pings = _Pings(url, monkeypatch)
        with session_scope(url) as session:  # the pool's one connection
            pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with psycopg.connect("host=127.0.0.1 user=postgres dbname=test", autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
            deadline = time.monotonic() + 5  # until the backend is gone
            while admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone() != (0,):
                assert time.monotonic() < deadline
                time.sleep(0.01)
        assert _select(url, 1) == 1  # pinged, found dead, replaced: no error
        assert pings.count == 1
    finally:
        dispose_all()
