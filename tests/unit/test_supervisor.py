"""``novaq up`` supervises (``novaq/launcher/supervisor.py``): a child that dies is
restarted with backoff and one line saying what died, how and where its log is; a child
that keeps dying stops the cluster, saying why; Ctrl-C/SIGTERM still stops everything;
the embedded broker is restarted on the same URL with its queued data.

Real child processes throughout (``python -c`` children that exit, crash or are killed),
run by the real ``Cluster.run_forever`` in the test's main thread; a helper thread sends
the test process the SIGTERM an operator would once the test has seen what it waits for.
"""

from __future__ import annotations

import io
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from novaq.launcher.children import Child
from novaq.launcher.cluster import Cluster
from novaq.launcher.plan import ProcessSpec
from novaq.launcher.supervisor import RestartPolicy, Supervisor, cluster_status, describe_exit
from novaq.settings import Settings

FAST = RestartPolicy(max_deaths=5, window_s=60.0, first_delay_s=0.1, max_delay_s=1.0)


# The settings of each test are its own: no NOVAQ_* or FLOWER_* of the shell or the tier.
pytestmark = pytest.mark.usefixtures("without_novaq_env")


class ScriptedCluster(Cluster):
    """A Cluster running the test's processes, with no database to upgrade."""

    def __init__(self, settings: Settings, specs: list[ProcessSpec], **kwargs: Any) -> None:
        kwargs.setdefault("migrate", lambda url: None)
        kwargs.setdefault("restart_policy", FAST)
        kwargs.setdefault("shutdown_timeout_s", 5.0)
        super().__init__(settings, **kwargs)
        self.specs = specs

    def plan(self, broker_url: str) -> list[ProcessSpec]:
        return self.specs


def python(name: str, code: str, *args: str) -> ProcessSpec:
    return ProcessSpec(name, [sys.executable, "-c", code, *args], dict(os.environ))


SLEEPER = "import time; time.sleep(120)"
# First run: exit 3. Next runs: say so and live.
ONCE = (
    "import pathlib, sys, time\n"
    "mark = pathlib.Path(sys.argv[1])\n"
    "if not mark.exists():\n"
    "    mark.touch(); print('first life', flush=True); sys.exit(3)\n"
    "print('second life', flush=True); time.sleep(120)\n"
)
# First run: leave a grandchild in the process group (as a prefork pool), then die of
# SIGKILL. Next runs: live.
KILLED_WITH_A_POOL = (
    "import os, pathlib, signal, subprocess, sys, time\n"
    "mark = pathlib.Path(sys.argv[1])\n"
    "if not mark.exists():\n"
    "    pool = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "    mark.write_text(str(pool.pid))\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
    "print('second life', flush=True); time.sleep(120)\n"
)


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists"; it is gone for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def log_has(cluster: Cluster, name: str, text: str) -> Callable[[], bool]:
    def check() -> bool:
        path = cluster.log_path(name)
        return path.exists() and text in path.read_text()

    return check


def run_until(cluster: Cluster, condition: Callable[[], bool], timeout_s: float = 30.0) -> int:
    """``cluster.run_forever()`` here, stopped by a SIGTERM to this process once
    ``condition`` holds (or after ``timeout_s``, when the test then fails)."""
    met = threading.Event()
    finished = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        try:
            while not finished.is_set() and time.monotonic() < deadline:
                if condition():
                    met.set()
                    break
                time.sleep(0.05)
        finally:
            if not finished.is_set():
                os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        status = cluster.run_forever()
    finally:
        finished.set()
        watcher.join()
    assert met.is_set(), f"not seen within {timeout_s} s"
    return status


# -- restarts --------------------------------------------------------------------------------
def test_a_child_that_exits_is_restarted_and_the_cluster_says_so(tmp_path: Path) -> None:
    output = io.StringIO()
    specs = [python("sleeper", SLEEPER), python("crasher", ONCE, str(tmp_path / "mark"))]
    cluster = ScriptedCluster(Settings(state_dir=tmp_path), specs, output=output)
    cluster.start()
    sleeper_pid = cluster._children[0].proc.pid

    status = run_until(cluster, log_has(cluster, "crasher", "second life"))

    assert status == 0  # a requested stop
    printed = output.getvalue()
    log = cluster.log_path("crasher")
    assert (
        f"crasher exited with status 3; restarting it in 0.1 s (death 1 of 5 allowed within "
        f"60 s); see {log}" in printed
    )
    assert "crasher restarted (pid " in printed
    assert "sleeper restarted" not in printed and "sleeper exited" not in printed
    # The log keeps both lives, with the restart between them.
    text = log.read_text()
    assert text.index("first life") < text.index("--- restarted by novaq up after it exited")
    assert text.index("--- restarted") < text.index("second life")
    # Only the crasher was restarted; a requested stop still stops everything.
    assert "SIGTERM received" in printed
    assert "sending SIGTERM to sleeper" in printed and "sending SIGTERM to crasher" in printed
    assert not pid_exists(sleeper_pid)
    assert cluster.processes == []


def test_a_child_killed_by_a_signal_is_named_so_and_its_leftovers_are_killed(
    tmp_path: Path,
) -> None:
    output = io.StringIO()
    mark = tmp_path / "pool.pid"
    specs = [python("worker", KILLED_WITH_A_POOL, str(mark))]
    cluster = ScriptedCluster(Settings(state_dir=tmp_path), specs, output=output)
    cluster.start()

    assert run_until(cluster, log_has(cluster, "worker", "second life")) == 0

    assert "worker was killed by SIGKILL; restarting it in 0.1 s" in output.getvalue()
    # The dead worker's "pool" did not outlive it (it would have kept a copy running).
    assert not pid_exists(int(mark.read_text()))


def test_a_child_that_keeps_dying_stops_the_cluster_with_a_clear_message(tmp_path: Path) -> None:
    output = io.StringIO()
    policy = RestartPolicy(max_deaths=3, window_s=60.0, first_delay_s=0.05, max_delay_s=0.2)
    specs = [
        python("sleeper", SLEEPER),
        python("quitter", "import sys; print('bad setting', flush=True); sys.exit(4)"),
    ]
    cluster = ScriptedCluster(
        Settings(state_dir=tmp_path), specs, output=output, restart_policy=policy
    )

    assert cluster.run_forever() == 4

    printed = output.getvalue()
    assert "quitter exited with status 4; restarting it in 0.05 s (death 1 of 3" in printed
    assert "quitter exited with status 4; restarting it in 0.1 s (death 2 of 3" in printed
    assert (
        "quitter exited with status 4: 3 deaths within 60 s, restarting does not help; "
        f"stopping the cluster; see {cluster.log_path('quitter')}" in printed
    )
    assert printed.count("quitter restarted (pid ") == 2
    assert "sending SIGTERM to sleeper" in printed
    assert cluster.processes == []
    assert cluster.log_path("quitter").read_text().count("bad setting") == 3


def test_a_requested_stop_during_a_pending_restart_restarts_nothing(tmp_path: Path) -> None:
    output = io.StringIO()
    slow = RestartPolicy(first_delay_s=60.0, max_delay_s=60.0)
    specs = [python("sleeper", SLEEPER), python("crasher", "raise SystemExit(2)")]
    cluster = ScriptedCluster(
        Settings(state_dir=tmp_path), specs, output=output, restart_policy=slow
    )
    cluster.start()

    status = run_until(cluster, lambda: "restarting it in 60 s" in output.getvalue())

    assert status == 0
    printed = output.getvalue()
    assert "crasher restarted" not in printed
    assert "sending SIGTERM to sleeper" in printed
    assert "all processes stopped" in printed
    assert cluster.processes == []


# -- the embedded broker ---------------------------------------------------------------------
def test_the_embedded_broker_is_restarted_on_the_same_url_with_its_data(tmp_path: Path) -> None:
    output = io.StringIO()
    specs = [python("sleeper", SLEEPER)]
    cluster = ScriptedCluster(Settings(state_dir=tmp_path), specs, output=output)
    cluster.start()
    broker = cluster._broker
    assert broker is not None
    url, first_pid = broker.url, broker.pid
    assert first_pid is not None
    with redis.Redis.from_url(url) as client:
        client.rpush("compute.host1", "a queued step")  # as a queued Celery message
    os.kill(first_pid, signal.SIGKILL)

    def answers_again() -> bool:
        if broker.pid == first_pid or not broker.running():
            return False
        try:
            with redis.Redis.from_url(url, socket_timeout=1) as client:
                return bool(client.lrange("compute.host1", 0, -1) == [b"a queued step"])
        except redis.RedisError:  # restarted, not answering yet
            return False

    assert run_until(cluster, answers_again) == 0
    printed = output.getvalue()
    assert "broker was killed by SIGKILL; restarting it in 0.1 s" in printed
    assert f"see {broker.log_path}" in printed
    assert "broker restarted (pid " in printed
    assert not broker.running()  # stopped with the cluster


# -- the policy ------------------------------------------------------------------------------
def test_the_pause_before_a_restart_doubles_up_to_its_limit() -> None:
    policy = RestartPolicy(first_delay_s=1.0, max_delay_s=30.0)
    assert [policy.delay(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_exit_statuses_are_described_and_mapped_as_a_shell_would() -> None:
    assert describe_exit(3) == "exited with status 3"
    assert describe_exit(-signal.SIGKILL) == "was killed by SIGKILL"
    assert describe_exit(-99) == "was killed by signal 99"
    assert [cluster_status(s) for s in (3, 0, -signal.SIGKILL)] == [3, 1, 137]


def test_deaths_older_than_the_window_no_longer_count(tmp_path: Path) -> None:
    """A process that dies now and then (here: once per 'minute' of a clock the test
    moves) is restarted for ever; only deaths within the window add up."""
    now = [0.0]
    lines: list[str] = []
    policy = RestartPolicy(max_deaths=2, window_s=60.0, first_delay_s=1.0)
    supervisor = Supervisor(lines.append, policy, clock=lambda: now[0])
    spec = python("flaky", "raise SystemExit(1)")
    child = Child(spec, tmp_path, lambda *_: None, None)
    try:
        for minute in range(4):
            now[0] = minute * 61.0
            child.proc.wait(timeout=10)
            assert supervisor.poll([child]) is None  # death 1 of 2 within the window
            assert supervisor.pending() == ["flaky"]
            now[0] += 1.0
            assert supervisor.poll([child]) is None  # restarted
        assert sum("death 1 of 2" in line for line in lines) == 4
        assert not any("stopping the cluster" in line for line in lines)
        now[0] += 2.0
        child.proc.wait(timeout=10)
        assert supervisor.poll([child]) == 1  # the second death within 60 s
    finally:
        child.proc.wait(timeout=10)
        child.close()
