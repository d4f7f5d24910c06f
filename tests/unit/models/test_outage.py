"""Waiting out a database outage (``models.outage``): inside a budget, work that meets
``DatabaseUnavailable`` is tried again with backoff until the deadline; outside one (the
API) it fails at once; ``session_scope`` waits for the database before a transaction."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from models import outage
from models.db import session_scope
from novaq.exceptions import DatabaseUnavailable
from tests.tcp_proxy import TcpProxy, reachable

needs_pg = pytest.mark.skipif(not reachable(5432), reason="no PostgreSQL on 127.0.0.1:5432")
QUICK = outage.Patience(tolerance_s=2.0, first_wait_s=0.01, max_wait_s=0.05)


class Flaky:
    """Fails with ``DatabaseUnavailable`` its first ``failures`` calls, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures, self.calls = failures, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise DatabaseUnavailable(reason=f"down (call {self.calls})")
        return "answer"


def test_outside_a_budget_nothing_waits() -> None:
    flaky = Flaky(1)
    with pytest.raises(DatabaseUnavailable):
        outage.ride_out(flaky, "test")
    assert flaky.calls == 1 and outage.remaining_s() == 0


def test_inside_a_budget_work_is_tried_again_until_the_database_answers() -> None:
    flaky = Flaky(5)
    with outage.tolerating(QUICK):
        assert outage.ride_out(flaky, "test") == "answer"
    assert flaky.calls == 6


def test_past_the_deadline_the_last_error_is_raised() -> None:
    flaky = Flaky(10**6)
    patience = outage.Patience(tolerance_s=0.3, first_wait_s=0.01, max_wait_s=0.05)
    started = time.monotonic()
    with outage.tolerating(patience), pytest.raises(DatabaseUnavailable, match="down"):
        outage.ride_out(flaky, "test")
    waited = time.monotonic() - started
    assert 0.3 <= waited < 2.0 and flaky.calls > 3


def test_other_errors_are_not_tried_again() -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise ValueError("a bug, not an outage")

    with outage.tolerating(QUICK), pytest.raises(ValueError):
        outage.ride_out(broken, "test")
    assert len(calls) == 1


def test_nested_waits_share_one_deadline() -> None:
    """An inner wait spends the same budget: the outer one does not start it over."""
    patience = outage.Patience(tolerance_s=0.3, first_wait_s=0.01, max_wait_s=0.05)
    down = Flaky(10**6)
    outer_tries = []

    def outer() -> str:
        outer_tries.append(1)
        return outage.ride_out(down, "inner")

    with outage.tolerating(patience), pytest.raises(DatabaseUnavailable):
        outage.ride_out(outer, "outer")
    assert len(outer_tries) == 1 and down.calls > 3


def test_renewed_gives_the_same_patience_from_now_and_then_the_old_budget_back() -> None:
    with outage.tolerating(outage.Patience(tolerance_s=0.2)):
        time.sleep(0.25)
        assert outage.remaining_s() == 0
        with outage.renewed():
            assert 0.1 < outage.remaining_s() <= 0.2
        assert outage.remaining_s() == 0
    with outage.renewed():
        assert outage.remaining_s() == 0  # outside a budget it gives none


@needs_pg
def test_a_transaction_waits_for_the_database_to_come_back(proxy: TcpProxy) -> None:
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
    with session_scope(url) as session:  # a pooled connection, which the outage cuts
        session.execute(text("SELECT 1"))
    proxy.refuse()
    threading.Timer(0.5, proxy.restore).start()
    started = time.monotonic()
    with outage.tolerating(QUICK), session_scope(url) as session:
        assert session.execute(text("SELECT 2")).scalar() == 2
    assert time.monotonic() - started >= 0.5


@needs_pg
def test_the_api_gets_database_unavailable_at_once(proxy: TcpProxy) -> None:
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
    proxy.refuse()
    started = time.monotonic()
    with pytest.raises(DatabaseUnavailable, match="refused"), session_scope(url):
        pass
    assert time.monotonic() - started < 5
