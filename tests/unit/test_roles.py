"""The roles ``novaq controller`` and ``novaq compute``: their plans (argv, environment),
what they refuse (missing broker or database, an old schema), and that neither they nor
their children discover a ``novaq up`` cluster's files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from novaq.exceptions import ConfigError
from novaq.launcher.plan import plan_processes
from novaq.launcher.roles import (
    ComputeHost,
    Controller,
    ImageEndpoint,
    check_schema,
    compute_plan,
    controller_plan,
)
from novaq.launcher.specs import BEAT_HOLDER_ENV, CELERY_ARGV, NOVAQ_ARGV, ProcessSpec
from novaq.settings import BROKER_URL_FILE, CLUSTER_CONFIG_FILE, Settings

REPO = Path(__file__).resolve().parents[2]
BROKER = "redis://127.0.0.1:6399/0"
DATABASE = "postgresql://novaq@db.example:5432/novaq"


# The settings of each test are its own: no NOVAQ_* or FLOWER_* of the shell or the tier.
pytestmark = pytest.mark.usefixtures("without_novaq_env")


def shared(tmp_path: Path, **overrides: object) -> Settings:
    return Settings(state_dir=tmp_path, broker_url=BROKER, database_url=DATABASE, **overrides)  # type: ignore[arg-type]


def by_name(specs: list[ProcessSpec]) -> dict[str, ProcessSpec]:
    return {spec.name: spec for spec in specs}


def option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# -- the controller's plan -----------------------------------------------------------------
def test_the_controller_runs_a_scheduler_a_standby_beat_flower_and_the_image_endpoint(
    tmp_path: Path,
) -> None:
    specs = by_name(controller_plan(shared(tmp_path, host="ctl-a"), {"NOVAQ_HOST": "shell"}))
    assert list(specs) == ["scheduler", "beat", "flower", "image-endpoint"]
    scheduler = specs["scheduler"]
    assert option(scheduler.argv, "-Q") == "scheduler,maintenance"
    assert option(scheduler.argv, "-n") == "scheduler@ctl-a" == scheduler.node
    assert scheduler.env["NOVAQ_HOST"] == "ctl-a"  # its scheduler service row's host
    beat = specs["beat"]
    assert option(beat.argv, "--scheduler") == "tasks.beat:StandbyScheduler"
    assert option(beat.argv, "--schedule") == str(tmp_path.resolve() / "celerybeat-schedule")
    assert ":novaq-controller-" in beat.env[BEAT_HOLDER_ENV]
    assert all("NOVAQ_HOST" not in specs[n].env for n in ("beat", "flower", "image-endpoint"))


def test_the_image_endpoint_is_the_novaq_command_with_its_address_and_port(
    tmp_path: Path,
) -> None:
    settings = shared(tmp_path)
    default = by_name(controller_plan(settings, {}))["image-endpoint"]
    assert default.argv == [sys.executable, "-m", "novaq.cli", "image-endpoint"]
    placed = ImageEndpoint(address="10.0.0.1", port=9393)
    endpoint = by_name(controller_plan(settings, {}, image_endpoint=placed))["image-endpoint"]
    assert endpoint.argv == [*NOVAQ_ARGV, "image-endpoint", "--address", "10.0.0.1",
                             "--port", "9393"]  # fmt: skip
    assert endpoint.node is None
    assert "image-endpoint" not in by_name(controller_plan(settings, {}, image_endpoint=None))


def test_novaq_argv_runs_the_novaq_command(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    shown = subprocess.run([*NOVAQ_ARGV, "--help"], env=env, capture_output=True, text=True,
                           check=True, cwd=tmp_path).stdout  # fmt: skip
    assert "controller" in shown and "compute" in shown


def test_the_controllers_flower_is_refused_on_a_public_address_without_a_login(
    tmp_path: Path,
) -> None:
    settings = shared(tmp_path, flower={"address": "0.0.0.0"})
    with pytest.raises(ConfigError, match="NOVAQ_FLOWER__BASIC_AUTH"):
        controller_plan(settings, {})
    with pytest.raises(ConfigError, match="NOVAQ_FLOWER__BASIC_AUTH"):
        Controller(settings, image_endpoint=None, quiet=True).start()
    assert not tmp_path.joinpath("logs").exists()


# -- the compute host's plan ---------------------------------------------------------------
def test_a_compute_host_runs_the_same_worker_as_novaq_up_for_that_host(tmp_path: Path) -> None:
    settings = shared(tmp_path, celery={"compute_concurrency": 3})
    [worker] = compute_plan(settings, {"NOVAQ_HOST": "shell"}, "cn-7")
    up = by_name(plan_processes(settings, ["cn-7"], BROKER, {}))["compute-cn-7"]
    assert worker.argv == up.argv
    assert worker.argv[: len(CELERY_ARGV) + 3] == [*CELERY_ARGV, "-A", "tasks", "worker"]
    assert option(worker.argv, "-Q") == "compute.cn-7"
    assert option(worker.argv, "-n") == "compute@cn-7" == worker.node
    assert option(worker.argv, "--pool") == "threads"
    assert worker.env["NOVAQ_HOST"] == "cn-7"


@pytest.mark.parametrize("name", ["", " ", "cn-1,cn-2", "compute@cn-1", "cn 1", "-cn"])
def test_a_compute_host_needs_a_host_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=r"--host.*is not a host name"):
        compute_plan(shared(tmp_path), {}, name)


# -- the environment of a role's children --------------------------------------------------
@pytest.mark.parametrize("plan", ["controller", "compute"])
def test_every_child_gets_the_configured_services_and_never_an_unset_config(
    tmp_path: Path, plan: str
) -> None:
    settings = shared(tmp_path)
    env = {"PATH": "/bin", "NOVAQ_BROKER_URL": "ignored://", "NOVAQ_HOST": "shell"}
    specs = controller_plan(settings, env) if plan == "controller" else compute_plan(
        settings, env, "cn-1"
    )  # fmt: skip
    for spec in specs:
        assert spec.env["PATH"] == "/bin"
        assert spec.env["NOVAQ_BROKER_URL"] == BROKER
        assert spec.env["NOVAQ_DATABASE_URL"] == DATABASE
        assert spec.env["NOVAQ_STATE_DIR"] == str(tmp_path.resolve())
        assert spec.env["NOVAQ_CONFIG"] == ""  # present, so find_local_cluster skips it
        assert spec.env["PYTHONUNBUFFERED"] == "1"


def test_the_operators_config_file_goes_to_every_child_as_an_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "novaq.toml").write_text("")
    monkeypatch.chdir(tmp_path)
    [worker] = compute_plan(shared(tmp_path), {"NOVAQ_CONFIG": "novaq.toml"}, "cn-1")
    assert worker.env["NOVAQ_CONFIG"] == str(tmp_path.resolve() / "novaq.toml")


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        ({"broker_url": BROKER}, "NOVAQ_DATABASE_URL"),
        ({"database_url": DATABASE}, "NOVAQ_BROKER_URL"),
        ({}, "NOVAQ_BROKER_URL and NOVAQ_DATABASE_URL"),
    ],
)
def test_a_role_without_the_shared_broker_or_database_is_refused_before_anything_starts(
    tmp_path: Path, given: dict[str, str], missing: str
) -> None:
    settings = Settings(state_dir=tmp_path / "state", **given)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=f"needs {missing} "):
        Controller(settings, image_endpoint=None, quiet=True)
    with pytest.raises(
        ConfigError, match=f"novaq compute runs from settings alone and needs {missing} "
    ):
        ComputeHost(settings, "cn-1", quiet=True)
    with pytest.raises(ConfigError, match=missing):
        compute_plan(settings, {}, "cn-1")
    assert not (tmp_path / "state").exists()


# -- no discovery --------------------------------------------------------------------------
def _leave_a_novaq_up_clusters_files(state_dir: Path) -> None:
    """What `novaq up` leaves for the other processes of its directory."""
    (state_dir / BROKER_URL_FILE).parent.mkdir(parents=True)
    (state_dir / BROKER_URL_FILE).write_text("redis://:up-password@127.0.0.1:1/0\n")
    (state_dir / CLUSTER_CONFIG_FILE).write_text(
        'database_url = "sqlite:////nowhere/up.sqlite"\n[[hosts]]\nname = "up-host"\n'
    )


_SETTINGS_OF_A_CHILD = (
    "import json; from novaq.settings import find_local_cluster, get_settings; "
    "found = find_local_cluster(); s = get_settings(); "
    "print(json.dumps([found, s.broker_url, s.sqlalchemy_url, [h.name for h in s.hosts]]))"
)


def test_a_roles_children_never_discover_a_novaq_up_clusters_files(tmp_path: Path) -> None:
    _leave_a_novaq_up_clusters_files(tmp_path)
    [worker] = compute_plan(shared(tmp_path), {**os.environ, "PYTHONPATH": str(REPO)}, "cn-1")
    out = subprocess.run([sys.executable, "-c", _SETTINGS_OF_A_CHILD], env=worker.env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    found, broker_url, database_url, hosts = json.loads(out)
    assert found == {}
    assert (broker_url, database_url, hosts) == (BROKER, DATABASE, [])


def test_the_same_child_environment_without_the_roles_config_would_discover_them(
    tmp_path: Path,
) -> None:
    # The control: the files above are found by a process given no NOVAQ_CONFIG.
    _leave_a_novaq_up_clusters_files(tmp_path)
    [worker] = compute_plan(shared(tmp_path), {**os.environ, "PYTHONPATH": str(REPO)}, "cn-1")
    env = {k: v for k, v in worker.env.items() if k != "NOVAQ_CONFIG"}
    out = subprocess.run([sys.executable, "-c", _SETTINGS_OF_A_CHILD], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    found, _, _, hosts = json.loads(out)
    assert list(found) == ["NOVAQ_CONFIG"] and hosts == ["up-host"]


def test_the_role_command_does_not_take_the_broker_a_novaq_up_cluster_left(
    tmp_path: Path,
) -> None:
    _leave_a_novaq_up_clusters_files(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVAQ_")}
    env.update(PYTHONPATH=str(REPO), NOVAQ_STATE_DIR=str(tmp_path), NOVAQ_DATABASE_URL=DATABASE)
    for command in (["compute", "--host", "cn-1"], ["controller"]):
        done = subprocess.run([*NOVAQ_ARGV, *command], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert done.returncode == 1, done.stderr
        assert "needs NOVAQ_BROKER_URL (or broker_url" in done.stderr
        assert "up-password" not in done.stderr + done.stdout
    assert not (tmp_path / "logs").exists()


# -- the schema ----------------------------------------------------------------------------
def test_a_role_refuses_a_database_that_is_not_migrated_and_names_the_command(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/empty.sqlite"
    with pytest.raises(ConfigError, match=r"at revision none, not \w+: run `novaq db upgrade`"):
        check_schema(url)
    settings = Settings(state_dir=tmp_path / "state", broker_url=BROKER, database_url=url)
    role = ComputeHost(settings, "cn-1", quiet=True)
    with pytest.raises(ConfigError, match="novaq db upgrade"):
        role.start()
    assert role.processes == []


def test_a_migrated_database_passes_the_check(migrated_sqlite_url: str) -> None:
    check_schema(migrated_sqlite_url)


def test_a_role_started_before_its_database_answers_waits_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import threading
    import time

    from models.db import dispose_all
    from models.migrate import upgrade

    # A real database that cannot be opened yet: its directory does not exist.
    url = f"sqlite:///{tmp_path}/later/novaq.sqlite"

    def bring_it_up() -> None:
        deadline = time.monotonic() + 60
        while "waiting for it" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        # Migrated aside, then put in place at once: the check never sees half a schema.
        upgrade(f"sqlite:///{tmp_path}/staging/novaq.sqlite")
        (tmp_path / "staging").rename(tmp_path / "later")

    helper = threading.Thread(target=bring_it_up, daemon=True)
    helper.start()
    check_schema(url)  # returns once the database answers at the newest revision
    helper.join(timeout=60)
    assert "checking the schema of sqlite:///" in caplog.text
    assert "the database answered after" in caplog.text
    dispose_all()


# -- the command ---------------------------------------------------------------------------
def test_the_compute_command_refuses_a_host_that_is_not_a_host_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.unit.cli import refused

    monkeypatch.setenv("NOVAQ_BROKER_URL", BROKER)
    monkeypatch.setenv("NOVAQ_DATABASE_URL", DATABASE)
    line = refused("compute", "--host", "cn-1,cn-2", "--state-dir", str(tmp_path / "s"))
    assert "ERROR (ConfigError): Invalid setting --host: 'cn-1,cn-2' is not a host name" in line
    assert not (tmp_path / "s").exists()


def test_the_controller_command_names_every_missing_setting(tmp_path: Path) -> None:
    from tests.unit.cli import refused

    line = refused("controller", "--state-dir", str(tmp_path / "s"))
    assert "needs NOVAQ_BROKER_URL and NOVAQ_DATABASE_URL (or broker_url and database_url" in line
    assert "Nothing was started." in line
    assert not (tmp_path / "s").exists()
