"""A caller of the API meets a database that cannot serve as one clear
``ServiceUnavailable`` naming the database, at once (no wait, no SQLAlchemy traceback):
connection refused, a database that does not exist, a server that closes connections.
The PostgreSQL cases use the local server (skipped without one) and a TCP proxy of the
test's own; the shared server is never stopped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from novaq.exceptions import DatabaseUnavailable, ServiceUnavailable
from novaq.settings import load_settings
from tests.tcp_proxy import TcpProxy, free_port, reachable
from workflows import api
from workflows.api import common as api_common

needs_pg = pytest.mark.skipif(not reachable(5432), reason="no PostgreSQL on 127.0.0.1:5432")
UUID = "6f1a0bb4-2a57-4d39-9a38-07f0c3b4a1a1"

CALLS: list[tuple[str, Callable[[], Any]]] = [
    ("list_flavors", api.list_flavors),
    ("create_flavor", lambda: api.create_flavor("m1.down", 1, 512, 1)),
    ("boot", lambda: api.boot("vm", "m1.down", "cirros")),
    ("show", lambda: api.show(UUID)),
    ("stop", lambda: api.stop(UUID)),
    ("list_services", api.list_services),
]


def _database_at(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    broken = load_settings(database_url=url)
    monkeypatch.setattr(api_common, "settings", lambda: broken)


def _assert_unavailable(call: Callable[[], Any], says: str) -> None:
    with pytest.raises(ServiceUnavailable) as caught:
        call()
    assert isinstance(caught.value, DatabaseUnavailable)
    assert caught.value.code == 503
    message = str(caught.value)
    assert message.startswith("database is unavailable: ") and says in message, message
    assert "[SQL:" not in message  # the driver's words only


@needs_pg
@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
def test_connection_refused(monkeypatch: pytest.MonkeyPatch, name: str, call: Any) -> None:
    _database_at(monkeypatch, f"postgresql://postgres@127.0.0.1:{free_port()}/test")
    _assert_unavailable(call, "Connection refused")


@needs_pg
@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
def test_database_does_not_exist(monkeypatch: pytest.MonkeyPatch, name: str, call: Any) -> None:
    _database_at(monkeypatch, "postgresql://postgres@127.0.0.1:5432/novaq_no_such_database")
    _assert_unavailable(call, 'database "novaq_no_such_database" does not exist')


@needs_pg
@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
def test_a_server_that_closes_connections(
    monkeypatch: pytest.MonkeyPatch, proxy: TcpProxy, name: str, call: Any
) -> None:
    proxy.hang_up()
    _database_at(monkeypatch, f"postgresql://postgres@127.0.0.1:{proxy.port}/test")
    _assert_unavailable(call, "server closed the connection unexpectedly")


def test_sqlite_that_cannot_be_opened(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    _database_at(monkeypatch, f"sqlite:///{tmp_path}/no/such/dir/novaq.sqlite")
    _assert_unavailable(api.list_flavors, "unable to open database file")
