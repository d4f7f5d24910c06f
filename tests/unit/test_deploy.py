"""The example deployment under ``deploy/``: its systemd units run real ``novaq``
commands with options that parse, stop the launcher as it expects, and name the
environment files that are there; those files give each role what it needs."""

from __future__ import annotations

import configparser
import shlex
from pathlib import Path

import click
import pytest

from novaq.cli import main
from novaq.launcher.group import SHUTDOWN_TIMEOUT_S
from novaq.launcher.roles import compute_plan, controller_plan
from novaq.settings import load_settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
UNITS = {"controller": "novaq-controller.service", "compute": "novaq-compute.service"}


# The settings of each test are its own: no NOVAQ_* or FLOWER_* of the shell or the tier.
pytestmark = pytest.mark.usefixtures("without_novaq_env")


def service(unit: str) -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((DEPLOY / "systemd" / unit).read_text())
    return parser["Service"]


def env_file(name: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in (DEPLOY / "etc" / name).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep and key.startswith("NOVAQ_"), line
        # systemd takes everything after '=' as the value: no comment may follow it.
        assert " #" not in value, line
        values[key] = value
    return values


@pytest.mark.parametrize("role", list(UNITS))
def test_each_unit_runs_its_role_with_options_that_parse(role: str) -> None:
    argv = shlex.split(service(UNITS[role])["ExecStart"].replace("${NOVAQ_HOST}", "cn-1"))
    assert argv[0].endswith("/bin/novaq") and argv[1] == role
    with main.make_context("novaq", argv[1:]) as group_context:
        command = main.get_command(group_context, role)
        assert isinstance(command, click.Command)
        params = command.make_context(role, argv[2:], parent=group_context).params
    assert params["state_dir"] == Path("/var/lib/novaq")
    if role == "compute":
        assert params["host"] == "cn-1"


@pytest.mark.parametrize("role", list(UNITS))
def test_each_unit_lets_the_launcher_stop_its_children_and_restarts_it_on_failure(
    role: str,
) -> None:
    unit = service(UNITS[role])
    assert unit["KillMode"] == "mixed"  # SIGTERM to the launcher alone, then SIGKILL to all
    assert float(unit["TimeoutStopSec"]) > SHUTDOWN_TIMEOUT_S
    assert unit["Restart"] == "on-failure" and unit["UMask"] == "0077"
    files = [line.split("=", 1)[1] for line in
             (DEPLOY / "systemd" / UNITS[role]).read_text().splitlines()
             if line.startswith("EnvironmentFile=")]  # fmt: skip
    assert files == ["/etc/novaq/novaq.env", f"/etc/novaq/{role}.env"]
    assert all((DEPLOY / "etc" / Path(f).name).is_file() for f in files)


@pytest.mark.parametrize("role", list(UNITS))
def test_the_example_environment_gives_each_role_what_it_needs(
    role: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**env_file("novaq.env"), **env_file(f"{role}.env")}
    assert env["NOVAQ_BROKER_URL"].startswith("amqp://")
    assert env["NOVAQ_DATABASE_URL"].startswith("postgresql://")
    assert env["NOVAQ_TRANSFER__SECRET"]
    assert env.pop("NOVAQ_CONFIG") == "/etc/novaq/novaq.toml"
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = load_settings(state_dir=tmp_path)
    if role == "controller":
        # Flower on the cluster's address is accepted: the example gives it a login.
        specs = controller_plan(settings, env)
        assert {s.name for s in specs} == {"scheduler", "beat", "flower", "image-endpoint"}
        assert settings.host == "ctl-1"
    else:
        [worker] = compute_plan(settings, env, settings.host)
        assert worker.node == "compute@cn-1"
