"""The local cluster: its process plan, its TOML file, and the children's lives."""

from __future__ import annotations

import dataclasses
import io
import os
import shlex
import socket
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from honcho.environ import parse_procfile

from novaq.exceptions import ConfigError, ServiceUnavailable
from novaq.launcher.cluster import Cluster
from novaq.launcher.flower_guard import flower_command, operator_credential
from novaq.launcher.flower_probe import workers_heard
from novaq.launcher.plan import (
    BEAT_HOLDER_ENV,
    CELERY_ARGV,
    ProcessSpec,
    cluster_config_path,
    plan_processes,
    write_cluster_config,
)
from novaq.settings import Settings
from tests.tcp_proxy import free_port

HERE = Path(__file__).parent
REPO = HERE.parents[1]
BROKER = "redis://127.0.0.1:6399/0"


# The settings of each test are its own: no NOVAQ_* or FLOWER_* of the shell or the tier.
pytestmark = pytest.mark.usefixtures("without_novaq_env")


def by_name(specs: list[ProcessSpec]) -> dict[str, ProcessSpec]:
    return {spec.name: spec for spec in specs}


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- plan_processes ------------------------------------------------------------------------
def test_plan_runs_a_scheduler_a_compute_worker_per_host_beat_and_flower(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    specs = by_name(plan_processes(settings, ["host1", "host2"], BROKER, {}))
    assert list(specs) == ["scheduler", "compute-host1", "compute-host2", "beat", "flower"]
    for spec in specs.values():
        assert spec.argv[:5] == [*CELERY_ARGV, "-A", "tasks"]


def test_plan_scheduler_consumes_scheduler_and_maintenance_with_prefork(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, celery={"scheduler_concurrency": 3})
    scheduler = by_name(plan_processes(settings, ["host1"], BROKER, {}))["scheduler"]
    argv = scheduler.argv
    assert argv[len(CELERY_ARGV) + 2] == "worker"
    assert option(argv, "-Q") == "scheduler,maintenance"
    assert option(argv, "-n") == f"scheduler@{socket.gethostname()}" == scheduler.node
    assert option(argv, "--pool") == "prefork"
    assert option(argv, "--concurrency") == "3"
    assert "-E" in argv and option(argv, "-l") == "INFO"
    assert "NOVAQ_HOST" not in scheduler.env


def test_plan_compute_workers_use_threads_one_queue_and_their_own_host(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, celery={"compute_concurrency": 6})
    specs = by_name(plan_processes(settings, ["host1", "host2"], BROKER, {"NOVAQ_HOST": "x"}))
    for host in ("host1", "host2"):
        spec = specs[f"compute-{host}"]
        assert option(spec.argv, "-Q") == f"compute.{host}"
        assert option(spec.argv, "-n") == f"compute@{host}" == spec.node
        assert option(spec.argv, "--pool") == "threads"
        assert option(spec.argv, "--concurrency") == "6"
        assert "-E" in spec.argv
        assert spec.env["NOVAQ_HOST"] == host
    assert "NOVAQ_HOST" not in specs["beat"].env


def test_plan_gives_every_child_the_cluster_environment(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path)
    specs = plan_processes(settings, ["host1"], BROKER, {"PATH": "/bin", "NOVAQ_BROKER_URL": "x"})
    for spec in specs:
        assert spec.env["PATH"] == "/bin"
        assert spec.env["NOVAQ_BROKER_URL"] == BROKER
        assert spec.env["NOVAQ_DATABASE_URL"] == f"sqlite:///{tmp_path.resolve()}/novaq.sqlite"
        assert spec.env["NOVAQ_STATE_DIR"] == str(tmp_path.resolve())
        assert spec.env["NOVAQ_CONFIG"] == str(tmp_path.resolve() / "cluster.toml")
        assert spec.env["PYTHONUNBUFFERED"] == "1"


def test_plan_runs_beat_with_its_schedule_in_the_state_dir(tmp_path: Path) -> None:
    beat = by_name(plan_processes(Settings(state_dir=tmp_path), [], BROKER, {}))["beat"]
    assert beat.argv[len(CELERY_ARGV) + 2] == "beat"
    assert option(beat.argv, "--schedule") == str(tmp_path.resolve() / "celerybeat-schedule")
    assert beat.node is None


def test_plan_gives_every_beat_of_one_launcher_the_same_lease_holder(tmp_path: Path) -> None:
    from tasks.beat import HOLDER_ENV

    settings = Settings(state_dir=tmp_path)
    first, again = (by_name(plan_processes(settings, ["host1"], BROKER, {})) for _ in range(2))
    holder = first["beat"].env[BEAT_HOLDER_ENV]
    assert BEAT_HOLDER_ENV == HOLDER_ENV
    assert holder == again["beat"].env[BEAT_HOLDER_ENV]  # a restarted beat takes it back
    assert f"novaq-up-{os.getpid()}" in holder
    assert all(BEAT_HOLDER_ENV not in first[n].env for n in ("scheduler", "compute-host1"))


def test_plan_passes_flower_basic_auth_only_to_flower_and_only_by_env(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, flower={"address": "0.0.0.0", "basic_auth": "a:pw"})
    specs = by_name(plan_processes(settings, ["host1"], BROKER, {}))
    assert specs["flower"].env["FLOWER_BASIC_AUTH"] == "a:pw"
    assert "--address=0.0.0.0" in specs["flower"].argv
    assert all("a:pw" not in " ".join(spec.argv) for spec in specs.values())
    assert "FLOWER_BASIC_AUTH" not in specs["scheduler"].env


def test_plan_refuses_an_unauthenticated_public_flower(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, flower={"address": "0.0.0.0"})
    with pytest.raises(ConfigError, match="NOVAQ_FLOWER__BASIC_AUTH"):
        plan_processes(settings, ["host1"], BROKER, {})


def test_the_procfile_runs_the_same_workers_as_the_plan_for_two_hosts(tmp_path: Path) -> None:
    procfile = parse_procfile((REPO / "Procfile").read_text()).processes
    plan = by_name(plan_processes(Settings(state_dir=tmp_path), ["host1", "host2"], BROKER, {}))
    pairs = {"scheduler": "scheduler", "compute1": "compute-host1", "compute2": "compute-host2"}
    for line_name, spec_name in pairs.items():
        argv = shlex.split(procfile[line_name])
        assert option(argv, "-Q") == option(plan[spec_name].argv, "-Q")
        expected_node = option(plan[spec_name].argv, "-n").replace(socket.gethostname(), "%h")
        assert option(argv, "-n") == expected_node
    assert procfile["compute1"].startswith("NOVAQ_HOST=host1 ")
    assert "--pool threads" in procfile["compute2"]
    assert procfile["beat"] == "celery -A tasks beat -l INFO"
    assert procfile["flower"] == "celery -A tasks flower --address=127.0.0.1 --port=5555"


def test_plan_serves_the_clusters_images_on_loopback_only_when_given_a_port(
    tmp_path: Path,
) -> None:
    settings = Settings(state_dir=tmp_path)
    assert "image-endpoint" not in by_name(plan_processes(settings, ["host1"], BROKER, {}))
    specs = by_name(plan_processes(settings, ["host1"], BROKER, {}, image_port=40123))
    endpoint = specs["image-endpoint"]
    assert endpoint.argv[-5:] == ["image-endpoint", "--address", "127.0.0.1", "--port", "40123"]
    assert endpoint.env["NOVAQ_CONFIG"] == specs["compute-host1"].env["NOVAQ_CONFIG"]
    assert endpoint.node is None
    assert endpoint.listens == ("127.0.0.1", 40123)  # what wait_ready waits for


# -- write_cluster_config ------------------------------------------------------------------
def load_as_settings(path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("NOVAQ_CONFIG", str(path))
    return Settings()


def test_cluster_config_generates_demo_hosts_with_two_gpus_on_host1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, hosts = write_cluster_config(Settings(state_dir=tmp_path), 3)
    assert path == cluster_config_path(Settings(state_dir=tmp_path))
    assert hosts == ["host1", "host2", "host3"]
    loaded = load_as_settings(path, monkeypatch)
    assert [(h.vcpus, h.memory_mb, h.local_gb) for h in loaded.hosts] == [(16, 32768, 500)] * 3
    gpus = loaded.hosts[0].pci_devices
    assert [(d.address, d.vendor_id, d.product_id) for d in gpus] == [
        ("0000:08:00.0", "10de", "13f1"),
        ("0000:88:00.0", "10de", "13f1"),
    ]
    assert loaded.hosts[1].pci_devices == ()
    (alias,) = loaded.pci.alias
    assert (alias.name, alias.vendor_id, alias.product_id, alias.device_type) == (
        "QuadroM4000-video", "10de", "13f1", "type-PCI",
    )  # fmt: skip
    (spec,) = loaded.pci.device_spec
    assert (spec.vendor_id, spec.product_id) == ("10de", "13f1")
    assert (path.stat().st_mode & 0o777) == 0o600


def test_cluster_config_keeps_the_users_options_and_pci_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = tmp_path / "novaq.toml"
    user.write_text(
        "report_interval = 5\n"
        "[filter_scheduler]\nram_weight_multiplier = 2.5\n"
        '[[pci.alias]]\nname = "a1"\nvendor_id = "8086"\nproduct_id = "1520"\n'
    )
    monkeypatch.setenv("NOVAQ_CONFIG", str(user))
    settings = Settings(state_dir=tmp_path / "state")
    path, hosts = write_cluster_config(settings, 2)
    assert hosts == ["host1", "host2"]
    loaded = load_as_settings(path, monkeypatch)
    assert loaded.report_interval == 5
    assert loaded.filter_scheduler.ram_weight_multiplier == 2.5
    assert [a.name for a in loaded.pci.alias] == ["a1"]
    assert loaded.pci.device_spec == ()
    assert user.read_text().startswith("report_interval = 5")  # the user's file is untouched


def test_cluster_config_names_the_clusters_database_for_a_second_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = "postgresql://novaq:secret@127.0.0.1:5432/cluster"
    path, _ = write_cluster_config(Settings(state_dir=tmp_path, database_url=url), 1)
    assert load_as_settings(path, monkeypatch).database_url == url
    monkeypatch.delenv("NOVAQ_CONFIG")
    state = tmp_path / "default"
    path, _ = write_cluster_config(Settings(state_dir=state), 1)  # the default: SQLite
    expected = f"sqlite:///{state.resolve()}/novaq.sqlite"
    assert load_as_settings(path, monkeypatch).database_url == expected


def test_cluster_config_uses_the_declared_hosts_and_ignores_the_count(tmp_path: Path) -> None:
    settings = Settings(
        state_dir=tmp_path,
        hosts=[
            {"name": "alpha", "vcpus": 8},
            {"name": "beta", "pci_devices": [
                {"address": "0000:01:00.0", "vendor_id": "8086", "product_id": "1520"}]},
        ],
    )  # fmt: skip
    path, hosts = write_cluster_config(settings, 5)
    assert hosts == ["alpha", "beta"]
    data: dict[str, Any] = tomllib.loads(path.read_text())
    assert data["hosts"][0]["vcpus"] == 8
    assert data["hosts"][1]["pci_devices"][0]["address"] == "0000:01:00.0"
    assert "pci" not in data


def test_cluster_config_needs_at_least_one_host(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one host"):
        write_cluster_config(Settings(state_dir=tmp_path), 0)


# -- Cluster ---------------------------------------------------------------------------------
def python_spec(name: str, code: str, node: str | None = None) -> ProcessSpec:
    return ProcessSpec(name, [sys.executable, "-c", code], dict(os.environ), node)


class ScriptedCluster(Cluster):
    """A Cluster whose plan is given by the test instead of ``plan_processes``."""

    def __init__(self, settings: Settings, specs: Any, **kwargs: Any) -> None:
        kwargs.setdefault("migrate", self.record_migration)
        super().__init__(settings, **kwargs)
        self.specs = specs
        self.migrated: list[str] = []

    def record_migration(self, url: str) -> None:
        self.migrated.append(url)

    def plan(self, broker_url: str) -> list[ProcessSpec]:
        return self.specs(broker_url) if callable(self.specs) else self.specs


def embedded_worker(broker_url: str, node: str, queue: str) -> ProcessSpec:
    env = {**os.environ, "EMBEDDED_BROKER_URL": broker_url, "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    argv = [*CELERY_ARGV, "-A", "embedded_app", "worker", "-n", node, "-Q", queue,
            "--pool", "threads", "--concurrency", "1", "-E", "-l", "INFO"]  # fmt: skip
    return ProcessSpec(node.replace("@", "-"), argv, env, node)


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_cluster_starts_broker_and_workers_waits_for_them_and_stops_everything(
    tmp_path: Path,
) -> None:
    def specs(url: str) -> list[ProcessSpec]:
        return [
            embedded_worker(url, "scheduler@test", "scheduler"),
            embedded_worker(url, "compute@host1", "compute.host1"),
        ]

    output = io.StringIO()
    cluster = ScriptedCluster(Settings(state_dir=tmp_path), specs, n_hosts=1, output=output)
    with cluster:
        cluster.wait_ready(timeout_s=60)
        assert cluster.hosts == ["host1"]
        assert cluster.broker_url.startswith("redis://:")
        assert cluster.migrated == [f"sqlite:///{tmp_path.resolve()}/novaq.sqlite"]
        pids = [child.proc.pid for child in cluster._children]
        assert cluster._broker is not None
        broker_pid = cluster._broker.pid
    assert broker_pid is not None
    assert not any(pid_exists(pid) for pid in [*pids, broker_pid])
    log = cluster.log_path("compute-host1").read_text()
    assert "compute@host1 ready" in log
    printed = output.getvalue()
    # The workers' banners and logs went to their log files only (issue 15, defect 7).
    assert "compute-host1 started (pid=" in printed
    assert "compute@host1 ready" not in printed and "celery@" not in printed
    assert "sending SIGTERM to scheduler-test" in printed
    assert "SIGKILL" not in printed


def test_the_console_gets_a_childs_errors_and_with_follow_every_line(tmp_path: Path) -> None:
    code = (
        "print('-------------- banner line', flush=True); "
        "print('[2026-01-01 00:00:00,000: ERROR/MainProcess] consumer: Cannot connect', "
        "flush=True); import time; time.sleep(30)"
    )
    printed = {}
    for follow in (False, True):
        output = io.StringIO()
        state = tmp_path / str(follow)
        with ScriptedCluster(
            Settings(state_dir=state), [python_spec("talker", code)], output=output, follow=follow
        ) as cluster:
            assert _wait_for_text(cluster.log_path("talker"), "Cannot connect")
            time.sleep(0.2)  # the console's copy follows the log's
        printed[follow] = output.getvalue()
    assert "ERROR/MainProcess] consumer: Cannot connect" in printed[False]
    assert "banner line" not in printed[False]
    assert "banner line" in printed[True] and "Cannot connect" in printed[True]


def test_quiet_cluster_writes_output_only_to_log_files(tmp_path: Path) -> None:
    output = io.StringIO()
    specs = [python_spec("talker", "import time; print('hello from talker'); time.sleep(30)")]
    with ScriptedCluster(Settings(state_dir=tmp_path), specs, quiet=True, output=output) as c:
        log = c.log_path("talker")
        seen = _wait_for_text(log, "hello from talker")
    assert seen
    assert output.getvalue() == ""


def _wait_for_text(path: Path, text: str, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return True
        time.sleep(0.05)
    return False


def test_wait_ready_names_the_workers_that_never_answer(tmp_path: Path) -> None:
    specs = [python_spec("ghost", "import time; time.sleep(30)", node="compute@ghost")]
    cluster = ScriptedCluster(Settings(state_dir=tmp_path), specs, quiet=True)
    with cluster, pytest.raises(ServiceUnavailable) as caught:
        cluster.wait_ready(timeout_s=2)
    assert "compute@ghost did not answer a ping" in str(caught.value)
    assert str(tmp_path.resolve() / "logs" / "ghost.log") in str(caught.value)


def test_wait_ready_reports_a_child_that_exited_with_its_log_tail(tmp_path: Path) -> None:
    specs = [python_spec("crasher", "print('ImportError: no tasks'); raise SystemExit(3)", "c@h")]
    cluster = ScriptedCluster(Settings(state_dir=tmp_path), specs, quiet=True)
    with cluster, pytest.raises(ServiceUnavailable) as caught:
        cluster.wait_ready(timeout_s=30)
    assert "crasher exited with status 3" in str(caught.value)
    assert "ImportError: no tasks" in str(caught.value)


def test_stop_kills_a_child_that_ignores_sigterm_after_the_grace_period(tmp_path: Path) -> None:
    code = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ignoring TERM', flush=True); time.sleep(60)"
    )
    output = io.StringIO()
    cluster = ScriptedCluster(
        Settings(state_dir=tmp_path), [python_spec("stubborn", code)],
        output=output, shutdown_timeout_s=0.5,
    )  # fmt: skip
    with cluster:
        assert _wait_for_text(cluster.log_path("stubborn"), "ignoring TERM")
        pid = cluster._children[0].proc.pid
    assert "sending SIGKILL to stubborn" in output.getvalue()
    assert not pid_exists(pid)


def test_start_refuses_an_open_flower_before_starting_anything(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, flower={"address": "0.0.0.0"})
    with pytest.raises(ConfigError):
        ScriptedCluster(settings, []).start()
    assert not (tmp_path / "broker").exists()


def test_start_stops_the_broker_when_the_migration_fails(tmp_path: Path) -> None:
    def failing_migration(url: str) -> None:
        raise RuntimeError("no alembic")

    cluster = ScriptedCluster(Settings(state_dir=tmp_path), [], migrate=failing_migration)
    with pytest.raises(RuntimeError, match="no alembic"):
        cluster.start()
    assert cluster._broker is not None and not cluster._broker.running()


def test_a_configured_broker_url_is_used_instead_of_an_embedded_one(tmp_path: Path) -> None:
    port = free_port()
    settings = Settings(state_dir=tmp_path, broker_url=BROKER, flower={"port": port})
    with ScriptedCluster(settings, []) as cluster:
        assert cluster.broker_url == BROKER
        assert cluster._broker is None
    assert cluster.flower_url == f"http://127.0.0.1:{port}"


def test_flowers_port_taken_by_another_program_moves_to_the_next_free_one(
    tmp_path: Path,
) -> None:
    output = io.StringIO()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = int(squatter.getsockname()[1])
        settings = Settings(state_dir=tmp_path, broker_url=BROKER, flower={"port": taken})
        with ScriptedCluster(settings, [], output=output) as cluster:
            moved = cluster.settings.flower.port
    assert moved > taken
    assert cluster.flower_url == f"http://127.0.0.1:{moved}"
    assert f"Flower's port {taken} is taken; Flower listens on {moved}" in output.getvalue()


def test_every_port_taken_is_refused_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from novaq.launcher import flower_guard

    monkeypatch.setattr(flower_guard, "port_is_free", lambda address, port: False)
    settings = Settings(state_dir=tmp_path, flower={"port": 5555})
    with pytest.raises(ServiceUnavailable, match="port 5555 on '127.0.0.1' and the next 100"):
        ScriptedCluster(settings, []).start()
    assert not (tmp_path / "broker").exists()


def real_flower(settings: Settings, broker_url: str) -> ProcessSpec:
    """Flower as the plan runs it (``flower_command``), on ``broker_url``."""
    argv, extra_env = flower_command(settings, CELERY_ARGV)
    env = {**os.environ, **extra_env, "PYTHONPATH": str(REPO)}
    env.update(NOVAQ_BROKER_URL=broker_url, NOVAQ_STATE_DIR=str(settings.state_dir))
    return ProcessSpec("flower", argv, env)


def test_the_ready_line_comes_once_the_workers_answer_and_flower_hears_them(
    tmp_path: Path,
) -> None:
    import threading

    port = free_port()
    settings = Settings(state_dir=tmp_path, flower={"port": port})

    def specs(url: str) -> list[ProcessSpec]:
        return [embedded_worker(url, "compute@host1", "compute.host1"), real_flower(settings, url)]

    output = io.StringIO()
    with ScriptedCluster(settings, specs, n_hosts=1, output=output) as cluster:
        done = threading.Event()
        announcer = threading.Thread(target=cluster._announce_ready, args=(done,))
        announcer.start()
        announcer.join(timeout=60)
        done.set()
        announcer.join()
        credentials = tmp_path.resolve() / "flower-credentials"
        lines = [line for line in output.getvalue().splitlines() if "cluster ready" in line]
        assert lines == [
            f"{lines[0].split('|')[0]}| cluster ready: compute-host1, flower; Flower "
            f"http://127.0.0.1:{port} (log in with the user:password in {credentials}); "
            f"logs in {tmp_path.resolve() / 'logs'}; Ctrl-C stops it"
        ]
        secret = credentials.read_text().strip()
        assert secret.split(":")[1] not in output.getvalue()
        # Announced only once Flower's event receiver has heard the worker.
        assert "compute@host1" in workers_heard(cluster.flower_url, secret)


def test_wait_ready_returns_once_flower_hears_every_worker(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, flower={"port": free_port()})

    def specs(url: str) -> list[ProcessSpec]:
        return [
            embedded_worker(url, "scheduler@test", "scheduler"),
            embedded_worker(url, "compute@host1", "compute.host1"),
            real_flower(settings, url),
        ]

    with ScriptedCluster(settings, specs, n_hosts=1, quiet=True) as cluster:
        assert workers_heard(cluster.flower_url, operator_credential(settings)) == set()
        cluster.wait_ready(timeout_s=60)
        heard = workers_heard(cluster.flower_url, operator_credential(settings))
        assert {"scheduler@test", "compute@host1"} <= heard
        # Without the credential Flower answers nothing (and the probe hears nothing).
        assert workers_heard(cluster.flower_url, "intruder:guess") == set()


def test_wait_ready_names_flower_when_it_hears_no_worker(tmp_path: Path) -> None:
    settings = Settings(state_dir=tmp_path, flower={"port": free_port()})

    def specs(url: str) -> list[ProcessSpec]:
        # Flower watching another broker (nothing listens there) never hears the worker.
        deaf = real_flower(settings, f"redis://127.0.0.1:{free_port()}/0")
        return [embedded_worker(url, "compute@host1", "compute.host1"), deaf]

    deaf = pytest.raises(ServiceUnavailable, match="Flower had no events from compute@host1")
    with ScriptedCluster(settings, specs, n_hosts=1, quiet=True) as cluster, deaf:
        cluster.wait_ready(timeout_s=15)


def test_wait_ready_waits_until_a_server_of_the_plan_accepts_connections(
    tmp_path: Path,
) -> None:
    """The image endpoint listening only a while after it started (its imports, its
    bind): the cluster is not ready before it listens, else a first boot could find its
    image unreachable."""
    port = free_port()
    late = (
        "import socket, time; time.sleep(3); s = socket.socket(); "
        "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
        f"s.bind(('127.0.0.1', {port})); s.listen(); print('listening', flush=True); "
        "time.sleep(30)"
    )
    server = dataclasses.replace(python_spec("image-endpoint", late), listens=("127.0.0.1", port))

    with ScriptedCluster(Settings(state_dir=tmp_path), [server], quiet=True) as cluster:
        cluster.wait_ready(timeout_s=60)  # (no worker to ping: a second's broadcast)
        assert "listening" in cluster.log_path("image-endpoint").read_text()


def test_wait_ready_names_a_server_that_never_listens(tmp_path: Path) -> None:
    port = free_port()
    mute = python_spec("image-endpoint", "print('bound elsewhere', flush=True); "
                       "import time; time.sleep(30)")  # fmt: skip
    mute = dataclasses.replace(mute, listens=("127.0.0.1", port))
    cluster = ScriptedCluster(Settings(state_dir=tmp_path), [mute], quiet=True)
    with cluster, pytest.raises(ServiceUnavailable) as caught:
        cluster.wait_ready(timeout_s=2)
    assert f"image-endpoint on 127.0.0.1:{port} accepted no connection" in str(caught.value)
    assert "bound elsewhere" in str(caught.value)


def test_a_new_cluster_database_gets_the_demo_image_once(tmp_path: Path) -> None:
    from models import Image
    from models.db import session_scope
    from novaq.launcher.cluster import _prepare_database
    from workflows.api.images import image_dict

    settings = Settings(state_dir=tmp_path)
    _prepare_database(settings, settings.sqlalchemy_url)
    _prepare_database(settings, settings.sqlalchemy_url)

    with session_scope(settings.sqlalchemy_url) as session:
        [image] = [image_dict(i) for i in session.query(Image)]
    assert (image["name"], image["status"], image["disk_format"]) == ("cirros", "active", "raw")
    assert Path(image["location"]) == (tmp_path / "images" / image["id"]).resolve()


_LISTENER = (
    "import socket, sys, time; port = int(sys.argv[1].split('=')[1]); s = socket.socket(); "
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('127.0.0.1', port)); "
    "s.listen(); print('listening on', port, flush=True); time.sleep(60)"
)


def test_flower_restarted_after_its_port_was_taken_meanwhile_moves_to_a_free_one(
    tmp_path: Path,
) -> None:
    from novaq.launcher.supervisor import RestartPolicy, Supervisor

    port = free_port()
    flower = ProcessSpec("flower", [sys.executable, "-c", _LISTENER, f"--port={port}"], {})
    output = io.StringIO()
    settings = Settings(state_dir=tmp_path, broker_url=BROKER, flower={"port": port})
    lines: list[str] = []
    supervisor = Supervisor(lines.append, RestartPolicy(first_delay_s=0.1))
    with ScriptedCluster(settings, [flower], output=output) as cluster:
        log = cluster.log_path("flower")
        assert _wait_for_text(log, f"listening on {port}")
        [child] = cluster._children
        child.kill()
        child.wait(10)
        with socket.socket() as squatter:  # someone takes the port while Flower is down
            squatter.bind(("127.0.0.1", port))
            squatter.listen()
            deadline = time.monotonic() + 20
            while not any(line.startswith("flower restarted") for line in lines):
                assert time.monotonic() < deadline, lines
                assert supervisor.poll(cluster._members()) is None
                time.sleep(0.05)
            moved = cluster.settings.flower.port
            assert moved != port, lines
            assert _wait_for_text(log, f"listening on {moved}")
    assert f"--port={moved}" in child.spec.argv
    assert cluster.flower_url == f"http://127.0.0.1:{moved}"
    assert f"Flower's port {port} is taken; Flower listens on {moved}" in output.getvalue()


def test_cluster_config_gives_the_cluster_a_transfer_secret_and_its_image_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = write_cluster_config(Settings(state_dir=tmp_path), 1, image_port=40123)
    loaded = load_as_settings(path, monkeypatch)
    assert loaded.glance.api_servers == ("http://127.0.0.1:40123",)
    assert loaded.transfer.secret is not None
    assert len(loaded.transfer.secret.get_secret_value()) >= 32
    monkeypatch.delenv("NOVAQ_CONFIG")  # not the first cluster's file as the user's
    again, _ = write_cluster_config(Settings(state_dir=tmp_path / "other"), 1)
    other = load_as_settings(again, monkeypatch)
    assert other.transfer.secret is not None  # every cluster has a secret of its own
    assert other.transfer.secret.get_secret_value() != loaded.transfer.secret.get_secret_value()
    assert other.glance.api_servers == ()
    assert (path.stat().st_mode & 0o777) == 0o600


def test_cluster_config_keeps_the_users_transfer_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOVAQ_TRANSFER__SECRET", "the-operators-own")
    settings = Settings(state_dir=tmp_path)
    path, _ = write_cluster_config(settings, 1)
    assert "transfer" not in path.read_text()  # the environment's reaches the children
    monkeypatch.delenv("NOVAQ_TRANSFER__SECRET")
    assert load_as_settings(path, monkeypatch).transfer.secret is None
