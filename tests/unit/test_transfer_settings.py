"""``[transfer]``, ``[glance] api_servers`` and ``num_retries``: read from the environment
as Nova spells them, checked at start, and the secret never shown."""

from __future__ import annotations

import pytest

from compute.transfer import image_servers, transfer_key
from novaq.exceptions import ConfigError
from novaq.settings import load_settings


def test_the_transfer_options_default_to_one_machine() -> None:
    s = load_settings()
    assert (s.transfer.secret, s.transfer.disk_port, s.transfer.url_ttl) == (None, 0, 300)
    assert s.glance.api_servers == ()
    assert transfer_key(s) is None and image_servers(s).servers == ()
    assert s.glance.num_retries == image_servers(s).num_retries == 3  # Nova's default


def test_the_environment_sets_them_and_the_secret_is_never_shown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NOVAQ_TRANSFER__SECRET", "hunter2-but-longer")
    monkeypatch.setenv("NOVAQ_TRANSFER__DISK_PORT", "9393")
    monkeypatch.setenv("NOVAQ_GLANCE__API_SERVERS", "http://c1:9292/, https://c2:9292")
    monkeypatch.setenv("NOVAQ_GLANCE__NUM_RETRIES", "0")
    s = load_settings()
    assert s.glance.api_servers == ("http://c1:9292", "https://c2:9292")
    assert image_servers(s).num_retries == 0
    assert s.transfer.disk_port == 9393
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.transfer)
    key = transfer_key(s)
    assert key is not None and key.secret == b"hunter2-but-longer"
    assert "hunter2" not in repr(image_servers(s))


def test_a_blank_secret_is_no_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVAQ_TRANSFER__SECRET", "")
    assert load_settings().transfer.secret is None


@pytest.mark.parametrize(
    ("env", "value", "named"),
    [
        ("NOVAQ_GLANCE__API_SERVERS", "controller:9292", "api_servers"),
        ("NOVAQ_TRANSFER__DISK_PORT", "70000", "disk_port"),
        ("NOVAQ_TRANSFER__URL_TTL", "0", "url_ttl"),
        ("NOVAQ_GLANCE__NUM_RETRIES", "-1", "num_retries"),
    ],
)
def test_a_wrong_value_is_refused_at_start(
    monkeypatch: pytest.MonkeyPatch, env: str, value: str, named: str
) -> None:
    monkeypatch.setenv(env, value)
    with pytest.raises(ConfigError, match=named):
        load_settings()


def test_image_endpoints_without_a_secret_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOVAQ_GLANCE__API_SERVERS", "http://controller:9292")
    with pytest.raises(ConfigError, match="NOVAQ_TRANSFER__SECRET"):
        image_servers(load_settings())
