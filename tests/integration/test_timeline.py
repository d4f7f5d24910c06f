"""The timeline end to end (issue 15, ★), on a real cluster (scheduler, host1, host2) with
a real Flower: boot, stop, resize, confirm and delete a server, then ``api.timeline`` and
``novaq timeline`` show every step in time order, the scheduler steps as tasks of their
own (distinct task ids, queue ``scheduler``) and the host steps on ``compute.<host>``,
with their outcomes and state transitions; Flower lists every one of those tasks, the
instance uuid in its args, and finds them all by the uuid. A step whose worker is
SIGKILLed shows its redelivery."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from novaq import fault_points
from novaq.cli import main
from tests.integration.checks import flavor
from tests.integration.fault_matrix import reap_until_settled
from tests.integration.workers import ROOT, Cluster
from tests.tcp_proxy import free_port
from tests.timelines import settled_timeline
from workflows import api

pytestmark = pytest.mark.integration

FLOWER_AUTH = "it:timeline"


class Flower:
    """A real Flower on loopback, reading the cluster's events: ready once its event
    receiver has heard from every worker of the cluster (its web server answers before it
    consumes events, and an event sent before that is lost: events are not queued for a
    receiver that has not bound its queue yet)."""

    def __init__(self, log: Path, nodes: set[str]) -> None:
        self.port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT), FLOWER_BASIC_AUTH=FLOWER_AUTH)
        argv = [sys.executable, "-m", "celery", "-A", "tasks", "flower"]
        argv += ["--address=127.0.0.1", f"--port={self.port}"]
        self.log = log.open("w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        heard: set[str] = set()
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                heard = {w["hostname"] for w in self.get("/workers?json=1")["data"]}
                if nodes <= heard:
                    return
            time.sleep(0.5)
        self.stop()
        raise AssertionError(
            f"Flower heard from {sorted(heard)}, not {sorted(nodes)}: {log.read_text()[-2000:]}"
        )

    def get(self, path: str) -> Any:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        token = base64.b64encode(FLOWER_AUTH.encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def tasks(self, search: str) -> dict[str, Any]:
        return dict(self.get(f"/api/tasks?search={urllib.parse.quote(search)}"))

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def flower(two_hosts: Cluster, tmp_path: Path) -> Iterator[Flower]:
    nodes = {w.argv[w.argv.index("-n") + 1] for w in two_hosts.workers.values() if "-n" in w.argv}
    watcher = Flower(tmp_path / "flower.log", nodes)
    yield watcher
    watcher.stop()


def _steps(op: dict[str, Any]) -> list[tuple[str, str | None]]:
    return [(s["task"], s["queue"]) for s in op["steps"]]


def test_a_server_s_whole_workflow_across_hosts(
    two_hosts: Cluster, flower: Flower, cleanup: list[str]
) -> None:
    [uuid] = api.boot("tl", flavor("tl.small", 1, 1024), "cirros")
    cleanup.append(uuid)
    source = api.wait(uuid, "ACTIVE", timeout=60)["host"]
    api.stop(uuid)
    api.wait(uuid, "SHUTOFF", timeout=60)
    api.resize(uuid, flavor("tl.big", 2, 2048))
    dest = api.wait(uuid, "VERIFY_RESIZE", timeout=60)["host"]
    api.confirm_resize(uuid)
    api.wait(uuid, "SHUTOFF", timeout=60)
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=60)

    data = settled_timeline(uuid)
    ops = data["operations"]
    assert [o["action"] for o in ops] == ["create", "stop", "resize", "confirmResize", "delete"]
    create, stop, resize, confirm, delete = ops
    assert _steps(create) == [
        ("scheduler.select_destinations", "scheduler"),
        ("compute.build_and_run_instance", f"compute.{source}"),
    ]
    select_step, build = create["steps"]
    assert select_step["task_id"] != build["task_id"]
    assert build["parent_id"] == select_step["task_id"]
    assert select_step["worker"].startswith("scheduler@")
    assert build["worker"] == f"compute@{source}"
    assert build["transitions"]["vm_state"] == ["building", "active"]
    assert build["transitions"]["power_state"] == ["NOSTATE", "RUNNING"]
    assert _steps(stop) == [("compute.stop_instance", f"compute.{source}")]
    assert stop["steps"][0]["transitions"]["vm_state"] == ["active", "stopped"]
    assert _steps(resize) == [
        ("scheduler.select_for_move", "scheduler"),
        ("compute.prep_resize", f"compute.{dest}"),
        ("compute.resize_instance", f"compute.{source}"),
        ("compute.finish_resize", f"compute.{dest}"),
    ]
    # Nova's task_states: prep keeps resize_prep; the source's step ends resize_migrated.
    assert [s["transitions"]["task_state"] for s in resize["steps"]] == [
        ["resize_prep", "resize_prep"],
        ["resize_prep", "resize_prep"],
        ["resize_prep", "resize_migrated"],
        ["resize_migrated", None],
    ]
    assert resize["steps"][-1]["transitions"]["vm_state"] == ["stopped", "resized"]
    assert _steps(confirm) == [("compute.confirm_resize", f"compute.{source}")]
    assert delete["steps"][0]["transitions"]["vm_state"][1] == "deleted"
    steps = [s for op in ops for s in op["steps"]]
    assert all(s["outcome"] == "success" and s["deliveries"] == 1 for s in steps)
    assert len({s["task_id"] for s in steps}) == len(steps)
    starts = [s["started_at"] for s in steps]
    assert starts == sorted(starts)

    # The command shows the same, as a tree and as JSON.
    tree = CliRunner().invoke(main, ["timeline", uuid])
    assert tree.exit_code == 0, tree.output
    assert "scheduler.select_for_move" in tree.output and "compute.finish_resize" in tree.output
    as_json = CliRunner().invoke(main, ["timeline", uuid, "--json"])
    assert json.loads(as_json.output)["operations"] == json.loads(json.dumps(ops))

    # Flower lists every step as a task of its own, found by the server's uuid.
    deadline = time.monotonic() + 30
    found: dict[str, Any] = {}
    while time.monotonic() < deadline:
        found = flower.tasks(uuid)
        if {s["task_id"] for s in steps} <= set(found) and all(
            found[s["task_id"]].get("state") == "SUCCESS" for s in steps
        ):
            break
        time.sleep(1)
    for s in steps:
        task = found.get(s["task_id"])
        assert task is not None, (s, sorted(found))
        assert task["name"] == s["task"] and uuid in task["args"], task
        assert task["state"] == "SUCCESS", task
    assert found[select_step["task_id"]]["result"].count(build["task_id"]) == 1
    # ... and the steps of one operation by its request id.
    by_request = flower.tasks(resize["request_id"])
    assert set(by_request) == {s["task_id"] for s in resize["steps"]}


@pytest.fixture
def fault_hosts(two_hosts: Cluster, tmp_path: Path) -> Iterator[Path]:
    """Two compute hosts of this test's own, whose workers honour fault points."""
    directory = tmp_path / "fault-points"
    directory.mkdir()
    env = {fault_points.ENV: str(directory)}
    for host in ("tl1", "tl2"):
        two_hosts.add(host, f"compute.{host}", f"compute@{host}", host, extra_env=env)
    two_hosts.wait_ready({"compute@tl1", "compute@tl2"})
    yield directory
    for host in ("tl1", "tl2"):
        two_hosts.retire(host, "timeline test over")


def test_a_step_whose_worker_was_killed_shows_its_redelivery(
    two_hosts: Cluster, fault_hosts: Path, cleanup: list[str]
) -> None:
    [uuid] = api.boot(
        "tl-kill", flavor("tl.small", 1, 1024), "cirros", availability_zone="nova:tl1"
    )
    cleanup.append(uuid)
    api.wait(uuid, "ACTIVE", timeout=60)
    point = "prep_resize:act"
    fault_points.arm_pause(fault_hosts, point)
    try:
        api.migrate(uuid, host="tl2")
        fault_points.wait_reached(fault_hosts, point, timeout_s=60)
        two_hosts.workers["tl2"].stop(signal.SIGKILL)
    finally:
        fault_points.release(fault_hosts, point)
    two_hosts.workers["tl2"].start()
    two_hosts.wait_ready({"compute@tl2"})
    reap_until_settled(uuid, ("VERIFY_RESIZE",))

    migrate = settled_timeline(uuid)["operations"][-1]
    assert migrate["action"] == "migrate"
    prep = next(s for s in migrate["steps"] if s["task"] == "compute.prep_resize")
    assert prep["deliveries"] == 2 and len(prep["delivery_log"]) == 2, prep
    assert all(line.startswith("compute@tl2 ") for line in prep["delivery_log"])
    assert prep["outcome"] == "success" and prep["queue"] == "compute.tl2"
    tree = CliRunner().invoke(main, ["timeline", uuid])
    assert "delivered 2 times" in tree.output, tree.output
