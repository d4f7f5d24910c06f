"""flower_guard: Flower's argv, its secret kept out of argv, and no open Flower off loopback."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from novaq.exceptions import ConfigError
from novaq.launcher.flower_guard import (
    BASIC_AUTH_ENV,
    credentials_path,
    flower_command,
    flower_url,
    is_loopback,
    new_operator_credential,
    operator_credential,
)
from novaq.settings import Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("NOVAQ_", "FLOWER_")):
            monkeypatch.delenv(name)
    # The generated operator credential goes to the state directory: a throwaway one.
    monkeypatch.setenv("NOVAQ_STATE_DIR", str(tmp_path / "state"))
    yield


def make_settings(**flower: object) -> Settings:
    return Settings(flower=flower)


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "127.9.8.7", "::1", "[::1]", "localhost", "LOCALHOST", "::ffff:127.0.0.1"],
)
def test_is_loopback_accepts_loopback_addresses(address: str) -> None:
    assert is_loopback(address)


@pytest.mark.parametrize(
    "address", ["0.0.0.0", "", "::", "192.168.1.10", "10.0.0.1", "example.com", "::ffff:10.0.0.1"]
)
def test_is_loopback_rejects_everything_else(address: str) -> None:
    assert not is_loopback(address)


def test_flower_command_runs_flower_of_the_tasks_app_on_the_configured_address() -> None:
    argv, extra_env = flower_command(make_settings(address="127.0.0.1", port=5601))
    assert argv == ["celery", "-A", "tasks", "flower", "--address=127.0.0.1", "--port=5601"]
    assert set(extra_env) == {BASIC_AUTH_ENV}  # never FLOWER_UNAUTHENTICATED_API


def test_flower_on_loopback_without_basic_auth_gets_the_runs_private_credential(
    tmp_path: Path,
) -> None:
    argv, extra_env = flower_command(make_settings(address="127.0.0.1"))
    path = tmp_path / "state" / "flower-credentials"
    user, password = extra_env[BASIC_AUTH_ENV].split(":")
    assert user == "operator" and len(password) >= 24
    assert path.read_text(encoding="utf-8") == f"operator:{password}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not any(password in arg for arg in argv)
    # The same run (the pre-start check, then the plan) sees the same credential.
    assert flower_command(make_settings())[1] == extra_env


def test_each_run_gets_a_new_operator_password(tmp_path: Path) -> None:
    settings = make_settings()
    path = new_operator_credential(settings)
    assert path == credentials_path(settings) == tmp_path / "state" / "flower-credentials"
    first = operator_credential(settings)
    assert new_operator_credential(settings) == path
    assert operator_credential(settings) != first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_configured_basic_auth_generates_no_credential(tmp_path: Path) -> None:
    settings = make_settings(basic_auth="admin:s3cret")
    assert new_operator_credential(settings) is None
    assert credentials_path(settings) is None
    assert flower_command(settings)[1] == {BASIC_AUTH_ENV: "admin:s3cret"}
    assert not (tmp_path / "state").exists()


def test_flower_command_uses_the_given_celery_invocation() -> None:
    argv, _ = flower_command(make_settings(), ["/venv/bin/python", "-m", "celery"])
    assert argv[:5] == ["/venv/bin/python", "-m", "celery", "-A", "tasks"]


def test_flower_command_refuses_every_interface_without_basic_auth() -> None:
    with pytest.raises(ConfigError) as caught:
        flower_command(make_settings(address="0.0.0.0"))
    assert "[flower] basic_auth (NOVAQ_FLOWER__BASIC_AUTH)" in str(caught.value)
    assert "0.0.0.0" in str(caught.value)


def test_flower_command_refuses_an_empty_address_without_basic_auth() -> None:
    with pytest.raises(ConfigError, match="every interface"):
        flower_command(make_settings(address=""))


def test_flower_command_passes_basic_auth_through_the_environment_not_argv() -> None:
    argv, extra_env = flower_command(make_settings(address="0.0.0.0", basic_auth="admin:s3cret"))
    assert extra_env == {BASIC_AUTH_ENV: "admin:s3cret"}
    assert not any("s3cret" in arg or "basic" in arg for arg in argv)
    assert "--address=0.0.0.0" in argv


def test_flower_command_rejects_malformed_basic_auth_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as caught:
        flower_command(make_settings(address="0.0.0.0", basic_auth="justapassword"))
    assert "justapassword" not in str(caught.value)


def test_flower_reads_basic_auth_from_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The contract flower_command relies on: Flower takes any option from FLOWER_<OPTION>.
    from flower.command import apply_env_options
    from tornado.options import options

    monkeypatch.setenv(BASIC_AUTH_ENV, "admin:s3cret,ops:other")
    saved = options.basic_auth
    try:
        apply_env_options()
        assert options.basic_auth == ["admin:s3cret", "ops:other"]
    finally:
        options.basic_auth = saved


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:5555"),
        ("0.0.0.0", "http://127.0.0.1:5555"),
        ("::1", "http://[::1]:5555"),
        ("localhost", "http://localhost:5555"),
    ],
)
def test_flower_url_is_browsable(address: str, url: str) -> None:
    assert flower_url(make_settings(address=address, basic_auth="a:b")) == url
