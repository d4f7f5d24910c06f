"""``novaq up`` restarts what dies instead of stopping the cluster, and says so (issue
14): a SIGKILLed compute worker, beat (its lease left behind) and embedded broker come
back, and the cluster boots a server afterwards; Ctrl-C still stops everything.

The cluster is the real command with nothing configured (embedded broker, SQLite, two
simulated hosts), as a user runs it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import Celery

from tests.tcp_proxy import free_port

pytestmark = pytest.mark.integration

NOVAQ = [sys.executable, "-m", "novaq.cli"]
ROOT = Path(__file__).resolve().parents[2]


class Up:
    """``novaq up --hosts 2`` in a session of its own, its output in ``log``; with
    ``in_directory``, run as a user runs it: nothing configured, its state in ``.novaq``
    of its working directory ``tmp_path``."""

    def __init__(
        self, tmp_path: Path, in_directory: bool = False, flower_port: int | None = None
    ) -> None:
        self.state = tmp_path / (".novaq" if in_directory else "state")
        self.log = tmp_path / "up.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
        self.env.update(
            NOVAQ_FLOWER__PORT=str(flower_port or free_port()),
            NOVAQ_REPORT_INTERVAL="1",
            PYTHONPATH=str(ROOT),
        )
        if not in_directory:
            self.env["NOVAQ_STATE_DIR"] = str(self.state)
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*NOVAQ, "up", "--hosts", "2"],
                env=self.env,
                cwd=tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def until(self, what: str, check: Callable[[], Any], timeout_s: float = 90) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"novaq up ended:\n{self.output()[-4000:]}"
            if result := check():
                return result
            time.sleep(0.25)
        raise AssertionError(f"{what}: not within {timeout_s} s\n{self.output()[-4000:]}")

    def printed(self, text: str) -> Callable[[], bool]:
        return lambda: text in self.output()

    def broker_url(self) -> str:
        path = self.state / "broker" / "url"
        self.until("the broker's URL", path.is_file)
        return path.read_text().strip()

    def answering(self, nodes: set[str]) -> Callable[[], bool]:
        def check() -> bool:
            app = Celery("probe", broker=self.broker_url(), set_as_current=False)
            try:
                replies = app.control.ping(timeout=1) or []
            except Exception:  # noqa: BLE001 - the broker is not back yet
                return False
            finally:
                app.close()
            return nodes <= {node for reply in replies for node in reply}

        return check

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                return self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    cluster = Up(tmp_path)
    yield cluster
    cluster.stop()


def _started_pid(output: str, name: str) -> int:
    [pid] = re.findall(rf"{re.escape(name)} started \(pid=(\d+)\)", output)
    return int(pid)


def _redis_pid(port: int) -> int:
    """The embedded broker's pid: the redis-server listening on ``port`` (Redis sets its
    process title to ``redis-server 127.0.0.1:<port>``)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if b"redis-server" in cmdline and f"127.0.0.1:{port}".encode() in cmdline:
            return int(proc.name)
    raise AssertionError(f"no redis-server on port {port}")


def _cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([*NOVAQ, *args, "--json"], env=env, capture_output=True, timeout=180)
    assert done.returncode == 0, done.stdout.decode()[-2000:] + done.stderr.decode()[-3000:]
    return json.loads(done.stdout)


def test_novaq_up_restarts_a_killed_worker_beat_and_broker_and_still_boots(up: Up) -> None:
    hosts = {"compute@host1", "compute@host2"}
    up.until("the workers answering", up.answering(hosts))

    # A compute worker dies: it is restarted, with one line saying so.
    pid = _started_pid(up.output(), "compute-host1")
    os.kill(pid, signal.SIGKILL)
    log = up.state.resolve() / "logs" / "compute-host1.log"
    up.until(
        "the death reported",
        up.printed(
            "compute-host1 was killed by SIGKILL; restarting it in 1 s (death 1 of 5 allowed "
            f"within 60 s); see {log}"
        ),
    )
    up.until("the restart reported", up.printed("compute-host1 restarted (pid "))
    up.until("the restarted worker answering", up.answering(hosts))

    # Beat dies without releasing its lease: the one restarted takes it back at once.
    os.kill(_started_pid(up.output(), "beat"), signal.SIGKILL)
    up.until("beat's death reported", up.printed("beat was killed by SIGKILL; restarting"))
    up.until("beat's restart reported", up.printed("beat restarted (pid "))
    beat_log = up.state / "logs" / "beat.log"
    up.until("beat's lease taken again", lambda: beat_log.read_text().count("lease taken") == 2)
    assert "another celery beat" not in beat_log.read_text()

    # The embedded broker dies: it is restarted on the same URL; the workers reconnect (or
    # are restarted in turn).
    url = up.broker_url()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    os.kill(_redis_pid(port), signal.SIGKILL)
    up.until("the broker's death reported", up.printed("broker was killed by SIGKILL; restarting"))
    up.until("the broker's restart reported", up.printed("broker restarted (pid "))
    assert up.broker_url() == url
    up.until("the workers answering again", up.answering(hosts), timeout_s=120)

    _cli(up.env, "flavor-create", "tiny", "--vcpus", "1", "--ram", "256", "--disk", "1")
    [server] = _cli(up.env, "boot", "vm1", "--flavor", "tiny", "--wait", "90")
    assert server["status"] == "ACTIVE"
    assert "stopping the cluster" not in up.output()

    assert up.stop() == 0  # Ctrl-C still stops everything
    assert "all processes stopped" in up.output()
    assert not (up.state / "broker" / "url").exists()


#: A second shell's Python session in the directory of the running cluster, with no
#: NOVAQ_* variable: the API must find the cluster's broker and config by itself.
SECOND_SHELL = """
from workflows import api
api.create_flavor("tiny", 1, 256, 1)
[uuid] = api.boot("vm1", "tiny", "cirros")
print(api.wait(uuid, "ACTIVE", timeout=90)["status"])
"""


def test_novaq_up_is_quiet_until_ready_moves_a_taken_flower_port_and_serves_the_python_api(
    tmp_path: Path,
) -> None:
    with socket.socket() as squatter:  # someone else's program on Flower's port
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = int(squatter.getsockname()[1])
        up = Up(tmp_path, in_directory=True, flower_port=taken)
        try:
            moved = re.compile(rf"Flower's port {taken} is taken; Flower listens on (\d+)")
            port = int(up.until("the port moved", lambda: moved.search(up.output())).group(1))
            ready = up.until("the ready line", lambda: re.search(r"cluster ready: .*", up.output()))
            credentials = (tmp_path / ".novaq" / "flower-credentials").resolve()
            assert ready.group(0).endswith(
                f"; Flower http://127.0.0.1:{port} (log in with the user:password in "
                f"{credentials}); logs in {(tmp_path / '.novaq' / 'logs').resolve()}; "
                "Ctrl-C stops it"
            )
            up.until(
                "Flower answering on its new port",
                lambda: _listening(port),
            )

            # The start-up output: the launcher's own lines, the ready line last; the
            # workers' banners are in their logs.
            startup = up.output()[: ready.end()]
            assert "celery@" not in startup and "[tasks]" not in startup
            assert all(" system " in line for line in startup.splitlines()), startup
            assert "[tasks]" in (tmp_path / ".novaq" / "logs" / "scheduler.log").read_text()
            assert credentials.read_text().split(":")[1].strip() not in up.output()

            # A second shell in the cluster's directory: the API finds its broker.
            env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
            env["PYTHONPATH"] = str(ROOT)
            done = subprocess.run(
                [sys.executable, "-c", SECOND_SHELL],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=150,
            )
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout.strip().splitlines()[-1] == "ACTIVE"
        finally:
            assert up.stop() == 0
    assert not (tmp_path / ".novaq" / "broker" / "url").exists()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
