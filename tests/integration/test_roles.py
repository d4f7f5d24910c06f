"""``novaq controller`` and ``novaq compute --host`` as an operator runs them: separate
processes, each with its own state directory, sharing only the broker (Redis) and the
database (PostgreSQL).

- a controller and two compute hosts start from settings alone, a server boots on each
  host and is deleted; the compute hosts' state directories hold a ``novaq up`` cluster's
  files (a broker URL, a ``cluster.toml`` naming the host with 2 vCPUs), which they must
  not read;
- a second controller stands by: its beat waits for the lease; when the first controller's
  machine dies (every one of its processes SIGKILLed), the second's beat takes over within
  the lease's bound, and its scheduler serves the next boot;
- SIGTERM stops every launcher cleanly, children included (a beat standing by too).

Each controller serves the images (``novaq image-endpoint``, on a port of its own); the
compute hosts fetch from them (``[glance] api_servers``, both controllers, in order), never
from the image store's files.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from compute.periodic import beat_lease
from compute.sessions import sessions_for
from novaq.exceptions import FlavorExists
from novaq.settings import BROKER_URL_FILE, CLUSTER_CONFIG_FILE, get_settings
from tasks.beat import TAKEOVER_BOUND_S
from tests.integration.workers import ROOT, Worker
from tests.tcp_proxy import free_port
from workflows import api

pytestmark = pytest.mark.integration

HOSTS = ("rh1", "rh2")
FLAVOR = "roles.small"
_STARTED = re.compile(r"\| (\S+) (?:re)?started \(pid[= ](\d+)\)")


class Launcher:
    """One role's ``novaq`` process (a session of its own, as systemd would run it) and
    the children it says it started."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], state_dir: Path):
        self.name = name
        self.state_dir = state_dir
        argv = [sys.executable, "-m", "novaq.cli", *args, "--state-dir", str(state_dir)]
        self.worker = Worker(name, argv, env, state_dir.parent / f"{name}.out").start()

    @property
    def pid(self) -> int:
        assert self.worker.proc is not None
        return self.worker.proc.pid

    def output(self) -> str:
        return self.worker.tail(100_000)

    def children(self) -> dict[str, int]:
        """Each child's latest pid, from the launcher's "started (pid=N)" lines."""
        return {name: int(pid) for name, pid in _STARTED.findall(self.output())}

    def log(self, child: str) -> str:
        path = self.state_dir / "logs" / f"{child}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for(self, text: str, timeout_s: float = 240.0) -> None:
        _wait(lambda: text in self.output(), timeout_s, lambda: f"{self.name}: {text!r}\n"
              f"{self.output()[-3000:]}")  # fmt: skip
        assert self.worker.alive(), self.output()[-3000:]

    def die(self) -> None:
        """The machine dies: the launcher and every child SIGKILLed at once."""
        children = self.children()
        os.kill(self.pid, signal.SIGKILL)
        for pid in children.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # each child leads its own group
        assert self.worker.proc is not None
        self.worker.proc.wait(30)

    def kill_leftovers(self) -> None:
        """Whatever is still alive once the test ends (it failed half-way)."""
        with contextlib.suppress(ProcessLookupError):
            self.die()


def _wait(condition: Callable[[], object], timeout_s: float, what: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            pytest.fail(f"gave up waiting after {timeout_s:g} s for {what()}")
        time.sleep(0.5)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.update(extra)
    return env


def _leave_a_novaq_up_clusters_files(state_dir: Path, host: str) -> None:
    """What `novaq up` would leave there: a role that read it would use a broker nobody
    runs and give its host 2 vCPUs."""
    (state_dir / BROKER_URL_FILE).parent.mkdir(parents=True)
    (state_dir / BROKER_URL_FILE).write_text("redis://:nobody@127.0.0.1:1/0\n")
    (state_dir / CLUSTER_CONFIG_FILE).write_text(
        f'[[hosts]]\nname = "{host}"\nvcpus = 2\nmemory_mb = 4096\nlocal_gb = 10\n'
    )


@pytest.fixture
def launchers() -> Iterator[list[Launcher]]:
    started: list[Launcher] = []
    yield started
    for launcher in started:
        launcher.kill_leftovers()


#: Each controller's image endpoint: ctl-a, ctl-b, ctl-c (the compute hosts know the first two).
IMAGE_PORTS = {name: free_port() for name in ("ctl-a", "ctl-b", "ctl-c")}


def _image_server(name: str) -> str:
    return f"http://127.0.0.1:{IMAGE_PORTS[name]}"


def _controller(tmp_path: Path, name: str) -> Launcher:
    # The API (this process, on the controller's machine) keeps the images in its store.
    store = str(get_settings().image_store_path.resolve())
    env = _env(NOVAQ_HOST=name, NOVAQ_FLOWER__PORT=str(free_port()), NOVAQ_GLANCE__STORE_PATH=store)
    args = ["controller", "--image-endpoint-address", "127.0.0.1",
            "--image-endpoint-port", str(IMAGE_PORTS[name])]  # fmt: skip
    return Launcher(name, args, env, tmp_path / name)


def _compute(tmp_path: Path, host: str) -> Launcher:
    state_dir = tmp_path / host
    _leave_a_novaq_up_clusters_files(state_dir, host)
    servers = f"{_image_server('ctl-a')},{_image_server('ctl-b')}"
    env = _env(NOVAQ_HOST="not-this-one", NOVAQ_GLANCE__API_SERVERS=servers)
    env.pop("NOVAQ_CONFIG")  # no operator's file: the role must not fall back to cluster.toml
    return Launcher(host, ["compute", "--host", host], env, state_dir)


def _boot_on(host: str, cleanup: list[str]) -> str:
    [uuid] = api.boot(f"roles-{host}", FLAVOR, "cirros", availability_zone=f"nova:{host}")
    cleanup.append(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=180)
    assert view["host"] == host
    return uuid


def _delete(uuid: str) -> None:
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=180)


def _holder(db_url: str) -> str:
    lease = beat_lease.holder_of(sessions_for(db_url))
    return "" if lease is None else lease.holder


def test_a_controller_and_two_compute_hosts_boot_and_delete_and_a_standby_controller_takes_over_beat(  # noqa: E501
    services: str, tmp_path: Path, launchers: list[Launcher], cleanup: list[str]
) -> None:
    with contextlib.suppress(FlavorExists):
        api.create_flavor(FLAVOR, 1, 512, 1)
    ctl_a = _controller(tmp_path, "ctl-a")
    launchers.append(ctl_a)
    computes = [_compute(tmp_path, host) for host in HOSTS]
    launchers.extend(computes)
    ctl_a.wait_for("controller ready: scheduler, beat, flower, image-endpoint;")
    for compute in computes:
        compute.wait_for(f"compute {compute.name} ready: compute-{compute.name};")
    assert f":novaq-controller-{ctl_a.pid}:" in _holder(services)
    _wait(lambda: {"rh1", "rh2"} <= {h["host"] for h in api.list_hosts()}, 120,
          lambda: f"hosts {HOSTS} in {api.list_hosts()}")  # fmt: skip

    # Each host from its own settings: not the 2 vCPUs of the cluster.toml left there.
    for host in HOSTS:
        assert api.show_hypervisor(host)["vcpus"] == 16
    for uuid in [_boot_on(host, cleanup) for host in HOSTS]:
        _delete(uuid)
    for compute in computes:
        assert (compute.state_dir / "hosts" / compute.name).is_dir()  # its own hypervisor
        # The image came over the network, from the first controller's endpoint.
        assert f"fetched from {_image_server('ctl-a')}/images/" in compute.log(
            f"compute-{compute.name}"
        )

    # A second controller: its beat stands by while the first's holds the lease.
    ctl_b = _controller(tmp_path, "ctl-b")
    launchers.append(ctl_b)
    ctl_b.wait_for("controller ready: scheduler, beat, flower, image-endpoint;")
    _wait(lambda: "standing by" in ctl_b.log("beat"), 120, lambda: ctl_b.log("beat")[-3000:])
    assert f":novaq-controller-{ctl_a.pid}:" in _holder(services)
    assert "restarting it" not in ctl_b.output()  # waiting, not dying and coming back

    # The first controller's machine dies; the second's beat takes the lease over.
    ctl_a.die()
    died_at = time.monotonic()
    bound_s = TAKEOVER_BOUND_S + 60  # plus the start of a busy machine's beat
    _wait(lambda: f":novaq-controller-{ctl_b.pid}:" in _holder(services), bound_s,
          lambda: f"the takeover; holder {_holder(services)!r}")  # fmt: skip
    took_s = time.monotonic() - died_at
    print(f"beat taken over {took_s:.1f} s after the first controller died")
    assert "took over the beat lease" in ctl_b.log("beat")
    _delete(_boot_on("rh2", cleanup))  # the second controller's scheduler serves

    # A third controller stands by in turn (and is stopped while it does).
    ctl_c = _controller(tmp_path, "ctl-c")
    launchers.append(ctl_c)
    ctl_c.wait_for("controller ready: scheduler, beat, flower, image-endpoint;")
    _wait(lambda: "standing by" in ctl_c.log("beat"), 120, lambda: ctl_c.log("beat")[-3000:])

    # SIGTERM stops each launcher and everything it started.
    for launcher in (ctl_c, ctl_b, *computes):
        children = launcher.children()
        launcher.worker.stop(signal.SIGTERM, timeout_s=90)
        assert launcher.worker.proc is not None
        assert launcher.worker.proc.returncode == 0, launcher.output()[-3000:]
        assert "all processes stopped" in launcher.output()
        assert "SIGKILL" not in launcher.output()
        assert not [name for name, pid in children.items() if _alive(pid)]
