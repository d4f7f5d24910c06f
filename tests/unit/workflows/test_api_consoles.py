"""Console URLs through the public API and ``novaq console-url``: a server booted through
a real (in-thread) worker on libvirt test:///, its console port read from the guest's
domain XML on its host, a token stored as a hash and validated."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse

import pytest
from click.testing import CliRunner
from sqlalchemy import select, update

from compute import consoles
from models import ConsoleAuthToken, Service
from models.db import session_scope
from novaq.cli import main
from novaq.exceptions import InstanceInvalidState, InstanceNotFound, InvalidInput, InvalidToken
from tests.factories import make_compute_node, make_instance
from workflows import api
from workflows.gate import InstanceHostDown


def _token(url: str) -> str:
    parsed = urlparse(url)
    assert f"{parsed.scheme}://{parsed.netloc}{parsed.path}" == consoles.SERIAL_BASE_URL
    [token] = parse_qs(parsed.query)["token"]
    return token


def _stored_hashes(db_url: str) -> list[str]:
    with session_scope(db_url) as session:
        return list(session.scalars(select(ConsoleAuthToken.token_hash)))


@pytest.fixture
def server(db_url: str, worker: None) -> Iterator[str]:
    """An ACTIVE server "web" on host1, deleted at teardown (its guest would otherwise
    clash by name with the next test's first guest)."""
    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("web", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    yield uuid
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


def test_a_running_server_gets_a_serial_console_url_by_name_or_uuid(
    db_url: str, server: str
) -> None:
    uuid = server
    by_name = api.get_console("web")
    by_uuid = api.get_console(uuid, console_type="serial")

    assert by_name["type"] == "serial"
    assert abs(by_name["expires"] - (time.time() + 600)) < 30  # [consoleauth] token_ttl
    token = _token(by_name["url"])
    assert _token(by_uuid["url"]) != token
    console = api.validate_console_token(token)
    # novaq's guests have a pty serial console: the fixed base plus its target port 0.
    assert (console["instance_uuid"], console["host"], console["port"]) == (
        uuid,
        "host1",
        consoles.SERIAL_PORT_BASE,
    )
    assert consoles.hash_token(token) in _stored_hashes(db_url)
    assert token not in _stored_hashes(db_url)

    api.stop(uuid)
    api.wait(uuid, "SHUTOFF", timeout=30)
    with pytest.raises(InstanceInvalidState, match="get_console"):
        api.get_console("web")


def test_console_url_command_prints_the_url_and_exits_1_on_errors(db_url: str, server: str) -> None:
    uuid = server
    runner = CliRunner()

    shown = runner.invoke(main, ["console-url", "web", "--json"])
    assert shown.exit_code == 0, shown.output
    console = json.loads(shown.output)
    assert api.validate_console_token(_token(console["url"]))["instance_uuid"] == uuid

    table = runner.invoke(main, ["console-url", uuid])
    assert table.exit_code == 0, table.output
    assert "ws://127.0.0.1:6083/?token=" in table.output and "serial" in table.output

    missing = runner.invoke(main, ["console-url", "no-such-server"])
    assert missing.exit_code == 1 and "InstanceNotFound" in missing.output


def test_console_requests_that_cannot_be_served_are_refused_before_any_token(
    db_url: str,
) -> None:
    make_compute_node(db_url, "host1")
    running = dict(vm_state="active", task_state=None, host="host1", node="host1")
    make_instance(db_url, display_name="twin", **running)
    make_instance(db_url, display_name="twin", **running)
    uuid = make_instance(db_url, display_name="solo", **running)
    make_instance(db_url, display_name="new", vm_state="building", task_state="scheduling")

    with pytest.raises(InvalidInput, match="2 servers are named 'twin'"):
        api.get_console("twin")
    with pytest.raises(InstanceNotFound):
        api.get_console("nobody")
    with pytest.raises(InvalidInput, match="not supported"):
        api.get_console("solo", console_type="novnc")
    with pytest.raises(InstanceInvalidState):
        api.get_console("new")
    with session_scope(db_url) as session:
        session.execute(update(Service).where(Service.host == "host1").values(forced_down=True))
    with pytest.raises(InstanceHostDown):
        api.get_console(uuid)
    assert _stored_hashes(db_url) == []


def test_validate_console_token_refuses_unknown_tokens(db_url: str) -> None:
    with pytest.raises(InvalidToken, match="unknown token"):
        api.validate_console_token("made-up")
