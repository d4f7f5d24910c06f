"""The console log through the public API and ``novaq console-log``: asked of the
server's host (a real in-thread worker on libvirt test:///), which reads the tail of the
guest's ``console.log`` in its instance directory. The test driver runs no guest to
write it, so the test writes what a guest would have printed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from novaq.cli import main
from novaq.exceptions import InstanceNotFound, InvalidInput
from tasks import context
from tests.factories import make_instance
from workflows import api
from workflows.gate import InstanceNotReady

PRINTED = "SeaBIOS\nLinux version 6.1\nNOVAQ-MARKER boot_id=1 cpus=1\nlogin: "


@pytest.fixture
def server(db_url: str, worker: None) -> Iterator[str]:
    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("web", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    yield uuid
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


def _log(uuid: str) -> Path:
    return Path(context.driver().instances_path) / uuid / "console.log"


def test_console_log_is_the_tail_of_the_guests_console(server: str) -> None:
    assert api.console_log(server) == ""  # nothing printed yet
    _log(server).write_text(PRINTED)

    assert api.console_log(server) == PRINTED
    assert api.console_log("web", length=2) == "NOVAQ-MARKER boot_id=1 cpus=1\nlogin: "
    assert api.console_log(server, length=0) == ""


def test_console_log_command_prints_it(server: str) -> None:
    _log(server).write_text(PRINTED)
    runner = CliRunner()

    result = runner.invoke(main, ["console-log", server, "--length", "1"])
    assert (result.exit_code, result.output) == (0, "login: ")
    assert runner.invoke(main, ["console-log", server, "--length", "-1"]).exit_code != 0


def test_console_log_refuses_bad_requests_before_asking_a_host(db_url: str) -> None:
    unplaced = make_instance(db_url)

    with pytest.raises(InstanceNotReady):
        api.console_log(unplaced)
    with pytest.raises(InstanceNotFound):
        api.console_log("no-such-server")
    with pytest.raises(InvalidInput):
        api.console_log(unplaced, length=-2)
