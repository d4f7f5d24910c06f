"""``show`` prints a server's power state by name (issue 15, "everywhere"); the JSON keeps
Nova's integer ``power_state`` and adds ``power_state_name`` (both as they were)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from models.states import PowerState
from novaq.cli import main
from tests.unit.workflows.servers import placed_server
from virt.power_state import NAMES
from workflows import api


def test_every_power_state_has_a_name() -> None:
    assert set(NAMES) == set(PowerState)


@pytest.mark.parametrize(
    ("vm_state", "power", "name"),
    [("active", 1, "running"), ("stopped", 4, "shutdown"), ("paused", 3, "paused")],
)
def test_show_prints_the_power_state_by_name_and_the_json_keeps_both(
    db_url: str, monkeypatch: pytest.MonkeyPatch, vm_state: str, power: int, name: str
) -> None:
    from novaq.cli.base import console

    monkeypatch.setattr(console, "width", 200)
    uuid = placed_server(db_url, vm_state, power_state=power)
    result = CliRunner().invoke(main, ["show", uuid])
    assert result.exit_code == 0, result.output
    [row] = [line for line in result.output.splitlines() if "power_state" in line]
    assert name in row and str(power) not in row.replace("power_state", "")
    shown = json.loads(CliRunner().invoke(main, ["show", uuid, "--json"]).output)
    assert (shown["power_state"], shown["power_state_name"]) == (power, name)
    assert api.show(uuid)["power_state"] == power
