"""``novaq up`` with nothing configured: embedded broker, SQLite, two simulated hosts,
scheduler, beat and Flower; a server boots through the ``novaq`` command and Flower's API
lists every worker and the build task with its instance."""

from __future__ import annotations

import base64
import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.tcp_proxy import free_port

pytestmark = pytest.mark.integration

NOVAQ = [sys.executable, "-m", "novaq.cli"]
ROOT = Path(__file__).resolve().parents[2]


def _bare_env(state_dir: Path, flower_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
    env.update(
        NOVAQ_STATE_DIR=str(state_dir),
        NOVAQ_FLOWER__PORT=str(flower_port),
        NOVAQ_REPORT_INTERVAL="1",
        PYTHONPATH=str(ROOT),
    )
    return env


def _get(url: str, auth: str | None = None) -> Any:
    request = urllib.request.Request(url)
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def _refused_without_credentials(url: str, method: str = "GET") -> bool:
    request = urllib.request.Request(url, method=method, data=b"{}" if method == "POST" else None)
    try:
        urllib.request.urlopen(request, timeout=5).close()
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    return False


def _poll(what: str, check: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{what} never happened (last: {last!r})")


@pytest.fixture
def novaq_up(tmp_path: Path) -> Iterator[tuple[dict[str, str], int, subprocess.Popen[bytes]]]:
    port = free_port()
    env = _bare_env(tmp_path / "state", port)
    log = (tmp_path / "up.log").open("wb")
    proc = subprocess.Popen(
        [*NOVAQ, "up", "--hosts", "2"],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield env, port, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()


def _ready_output(log: Path) -> str | None:
    text = log.read_text()
    return text if "cluster ready: " in text else None


def _cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([*NOVAQ, *args, "--json"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def test_novaq_up_with_nothing_configured_boots_and_flower_sees_it(
    novaq_up: tuple[dict[str, str], int, subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    env, port, proc = novaq_up
    flower = f"http://127.0.0.1:{port}"
    wanted = {"compute@host1", "compute@host2"}
    state = tmp_path / "state"
    credentials = state / "flower-credentials"
    _poll("the operator credential", credentials.is_file)
    auth = credentials.read_text().strip()

    def workers() -> dict[str, Any] | None:
        assert proc.poll() is None, (tmp_path / "up.log").read_text()
        seen = _get(f"{flower}/api/workers?refresh=1", auth)
        names = set(seen)
        if wanted <= names and any(n.startswith("scheduler@") for n in names):
            return seen
        return None

    seen = _poll("Flower listing every worker", workers, timeout_s=90)
    assert [q["name"] for q in seen["compute@host1"]["active_queues"]] == ["compute.host1"]
    assert (tmp_path / "state" / "broker" / "url").read_text().startswith("redis://")
    # Flower, as novaq up starts it, runs nothing for a caller without the credential.
    assert _refused_without_credentials(
        f"{flower}/api/task/async-apply/compute.build_and_run_instance", "POST"
    )
    assert _refused_without_credentials(f"{flower}/api/workers")
    # Where the login is, said by the ready line that ends the start-up; never the login.
    up_log = _poll("the ready line", lambda: _ready_output(tmp_path / "up.log"))
    assert str(credentials.resolve()) in up_log and auth.split(":")[1] not in up_log

    _cli(env, "flavor-create", "tiny", "--vcpus", "1", "--ram", "256", "--disk", "1")
    [server] = _cli(env, "boot", "vm1", "--flavor", "tiny", "--wait", "60")
    assert server["status"] == "ACTIVE" and server["host"] in {"host1", "host2"}

    def build_task() -> dict[str, Any] | None:
        tasks = _get(f"{flower}/api/tasks", auth)
        for task in tasks.values():
            if (
                task["name"] == "compute.build_and_run_instance"
                and server["uuid"] in task["kwargs"]
            ):
                return task
        return None

    task = _poll("Flower showing the build task", build_task)
    assert task["state"] == "SUCCESS" and task["worker"] == f"compute@{server['host']}"
    # Everything the running cluster wrote (database, logs, beat's schedule, broker files,
    # cluster.toml, the credential, the demo image) is its owner's alone.
    opened = {
        str(path.relative_to(state)): oct(stat.S_IMODE(path.lstat().st_mode))
        for path in [state, *state.rglob("*")]
        if stat.S_IMODE(path.lstat().st_mode) & 0o077
    }
    assert not opened

    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(40) == 0
    assert not (tmp_path / "state" / "broker" / "url").exists()


def test_novaq_demo_runs_its_scenario_twice_on_one_state_directory(tmp_path: Path) -> None:
    """The main job, as the README runs it: boots, accounts, shows what the periodic tasks
    did, deletes back to reserved and stops everything; a second run on the same state
    directory shows its own periodic runs, not the first one's too."""
    env = _bare_env(tmp_path / "state", free_port())
    for _ in range(2):
        done = subprocess.run(
            [*NOVAQ, "demo", "--servers", "3"],
            env={**env, "COLUMNS": "200"},
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        out = done.stdout
        assert "Cluster up" in out and "Hosts after delete (back to reserved)" in out
        assert out.count("ACTIVE") >= 3
        # Each compute worker ran its run-immediately tasks once at its start.
        [power_sync] = [line for line in out.splitlines() if "_sync_power_states" in line]
        assert "host1: 1 (ok)" in power_sync and "host2: 1 (ok)" in power_sync
        after = out[out.index("Hosts after delete") :]
        assert after.count("512/32768") == 2  # both hosts back to their reserved RAM
    assert not (tmp_path / "state" / "broker" / "url").exists()
