"""Bad input through the command (issue 14, items 8 and 9): the cases of
``bad_input.CLI_CASES`` end in one ``ERROR (...)`` line naming the field, exit code 1, and
nothing written; names that look like rich markup are printed literally."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from novaq.cli import base, main
from tests.unit.workflows.bad_input import CLI_CASES, fill, make_world, state
from tests.unit.workflows.servers import placed_server


@pytest.fixture
def world(db_url: str) -> dict[str, Any]:
    return make_world(db_url)


@pytest.mark.parametrize(("argv", "field"), [pytest.param(*c[1:], id=c[0]) for c in CLI_CASES])
def test_the_command_refuses_bad_input_naming_the_field_and_writes_nothing(
    db_url: str, world: dict[str, Any], argv: list[str], field: str
) -> None:
    before = state(db_url)
    result = CliRunner().invoke(main, [str(fill(a, world)) for a in argv])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "ERROR (" in result.output and field in result.output, result.output
    assert state(db_url) == before


@pytest.mark.parametrize("name", ["[/bold]", "[link=http://x]click[/link]", "[red]x", "\\[b]"])
def test_a_server_named_like_markup_lists_and_shows_literally(
    db_url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.console, "width", 300)  # no cell wrapped: the name on one line
    uuid = placed_server(db_url, "active", display_name=name)
    runner = CliRunner()
    listed = runner.invoke(main, ["list"])
    assert listed.exit_code == 0, listed.output
    assert name in listed.output
    shown = runner.invoke(main, ["show", uuid])
    assert shown.exit_code == 0 and name in shown.output, shown.output
    as_json = runner.invoke(main, ["list", "--json"])
    assert [s["name"] for s in json.loads(as_json.output)] == [name]
