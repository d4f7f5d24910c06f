"""flower_guard: Flower's argv, its secret kept out of argv, and no open Flower off loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from novaq.exceptions import ConfigError
from novaq.launcher.flower_guard import BASIC_AUTH_ENV, flower_command, flower_url, is_loopback
from novaq.settings import Settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith(("NOVAQ_", "FLOWER_")):
            monkeypatch.delenv(name)
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
    assert extra_env == {"FLOWER_UNAUTHENTICATED_API": "true"}


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
