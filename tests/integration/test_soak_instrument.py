"""The soak's instruments do what they say: the TCP proxy really refuses and cuts (a plain
echo server and PostgreSQL behind it), the broker restart really loses or keeps the data,
faults end by themselves, and the findings call a request lost only when it is."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.private_redis import PrivateRedis
from tests.integration.soak_faults import BrokerRestart, DbOutage, schedule
from tests.integration.soak_findings import (
    FaultWindow,
    Request,
    describe_server,
    fault_context,
    open_events,
    unfinished,
)
from tests.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback server that sends back what it gets, one thread per connection."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def echo(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # a cut by the proxy ends it
            while data := conn.recv(4096):
                conn.sendall(data)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    stop.set()
    server.close()


def _roundtrip(port: int, payload: bytes = b"ping") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(payload)
        return sock.recv(4096)


def test_the_proxy_forwards_refuses_and_cuts_then_accepts_again_on_the_same_port(
    echo_port: int,
) -> None:
    proxy = TcpProxy(echo_port).start()
    try:
        assert _roundtrip(proxy.port) == b"ping"
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=2) as open_conn:
            open_conn.sendall(b"a")
            assert open_conn.recv(10) == b"a"
            port = proxy.port

            proxy.refuse()
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=2)
            try:
                cut = open_conn.recv(10) == b""
            except OSError:
                cut = True
            assert cut, "the open connection was not cut"

        proxy.accept()
        assert proxy.port == port
        assert _roundtrip(port, b"again") == b"again"
    finally:
        proxy.close()


def test_postgresql_behind_the_proxy_fails_while_refusing_and_serves_after(
    services: str,
) -> None:
    proxy = TcpProxy(5432).start()
    url = f"postgresql://postgres@127.0.0.1:{proxy.port}/test"
    try:
        with psycopg.connect(url, connect_timeout=3) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
            proxy.refuse()
            with pytest.raises(psycopg.OperationalError):
                conn.execute("select 1")
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=3)
        proxy.accept()
        with psycopg.connect(url, connect_timeout=3) as conn:
            assert conn.execute("select 2").fetchone() == (2,)
    finally:
        proxy.close()


def test_a_db_outage_ends_by_itself_after_its_duration(echo_port: int) -> None:
    proxy = TcpProxy(echo_port).start()
    ended: list[str] = []
    outage = DbOutage(proxy, outage_s=0.5)
    try:
        outage.inject(ended.append)
        assert outage.active() and proxy.refusing
        assert outage.wait_over(10)
        assert not proxy.refusing and ended == ["db outage: over"]
        assert _roundtrip(proxy.port) == b"ping"
    finally:
        proxy.close()


@pytest.mark.parametrize("fresh", [False, True])
def test_a_broker_restart_keeps_its_data_unless_fresh(tmp_path: Path, fresh: bool) -> None:
    broker = PrivateRedis(tmp_path / "redis").start()
    try:
        with broker.client() as client:
            client.set("queued", "message")
        first = broker.process
        restart = BrokerRestart(broker, down_s=0.3, fresh=fresh)
        restart.inject(lambda line: None)
        assert first is not None and not first.alive()
        assert restart.wait_over(30) and restart.errors == []
        assert broker.process is not None and broker.process.alive()
        with broker.client() as client:
            assert client.get("queued") == (None if fresh else b"message")
    finally:
        broker.stop()


def test_faults_are_scheduled_at_distinct_cycles_away_from_the_kills() -> None:
    faults: list[Any] = [object() for _ in range(5)]
    plan = schedule(faults, cycles=100, seed=7, avoid={25, 50, 75})
    cycles = list(plan)
    assert len(cycles) == 5 and not set(cycles) & {25, 50, 75}
    assert all(10 <= c < 85 for c in cycles)
    assert plan == schedule(faults, cycles=100, seed=7, avoid={25, 50, 75})


# -- what counts as stuck and lost (the API's dicts, no cluster) ------------------------


def _view(status: str = "ACTIVE", task_state: str | None = None) -> dict[str, Any]:
    return {"uuid": "u1", "status": status, "vm_state": status.lower(),
            "task_state": task_state, "host": "soak1", "fault": None}  # fmt: skip


def _action(name: str, rid: str, *results: str | None, finished: bool = False) -> dict[str, Any]:
    events = [{"event": f"compute_{name}", "host": "soak1", "result": r} for r in results]
    return {"action": name, "request_id": rid, "start_time": "t0",
            "finish_time": "t1" if finished else None, "events": events}  # fmt: skip


def test_a_move_with_every_step_ended_is_finished_though_its_action_never_closes() -> None:
    actions = [_action("create", "r1", "Success", finished=True),
               _action("resize", "r2", "Success", "Success", "Success")]  # fmt: skip
    assert unfinished(Request("resize", "u1", "r2", 3), _view("VERIFY_RESIZE"), actions) is None
    assert unfinished(Request("boot", "u1", None, 1), _view("VERIFY_RESIZE"), actions) is None


def test_a_stop_that_never_ran_on_a_settled_server_is_lost() -> None:
    actions = [_action("create", "r1", "Success", finished=True), _action("stop", "r2")]
    why = unfinished(Request("stop", "u1", "r2", 5), _view("ACTIVE"), actions)
    assert why == "stop r2: no step of it ever ran"


def test_a_request_on_a_server_that_never_settled_is_lost() -> None:
    actions = [_action("create", "r1", None)]
    why = unfinished(Request("boot", "u1", None, 1), _view("BUILD", "spawning"), actions)
    assert why is not None and "never settled (BUILD/spawning)" in why


def test_a_delete_that_finished_supersedes_what_was_in_flight() -> None:
    actions = [_action("create", "r1", "Success", finished=True), _action("resize", "r2"),
               _action("delete", "r3", "Success", finished=True)]  # fmt: skip
    assert unfinished(Request("resize", "u1", "r2", 4), _view("DELETED"), actions) is None


def test_a_request_with_no_action_recorded_is_lost() -> None:
    why = unfinished(Request("stop", "u1", "r9", 2), _view(), [_action("create", "r1")])
    assert why == "no instance action was recorded"


def test_a_stuck_server_is_described_with_its_last_action_event_and_migration() -> None:
    migration = {"uuid": "m1", "migration_type": "resize", "status": "migrating",
                 "source_compute": "soak1", "dest_compute": "soak2"}  # fmt: skip
    details = describe_server(
        _view("RESIZE", "resize_migrating"),
        [_action("create", "r1", "Success"), _action("resize", "r2", "Success", None)],
        [migration],
    )
    assert details["task_state"] == "resize_migrating" and details["host"] == "soak1"
    assert details["last_action"] == "resize r2 (open, started t0)"
    assert details["last_event"] == "compute_resize on soak1: no result"
    assert details["migration"] == "resize m1 migrating soak1 -> soak2"
    assert open_events([_action("resize", "r2", "Success", None)]) == [
        "resize r2: compute_resize on soak1"
    ]


def test_a_lost_request_is_put_in_the_window_of_the_fault_it_met() -> None:
    windows = [FaultWindow("worker SIGKILL", 5.0, 8.0), FaultWindow("db outage", 20.0, 30.0),
               FaultWindow("broker restart (empty)", 40.0)]  # fmt: skip
    assert fault_context(-9.0, windows) == "before any fault"
    assert fault_context(1.0, windows) == "just before worker SIGKILL"
    assert fault_context(6.0, windows) == "during worker SIGKILL"
    assert fault_context(12.0, windows) == "after worker SIGKILL"
    assert fault_context(17.0, windows) == "just before db outage"
    assert fault_context(30.0, windows) == "during db outage"
    assert fault_context(99.0, windows) == "during broker restart (empty)"
