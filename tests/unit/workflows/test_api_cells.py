"""Host discovery through the public API and ``novaq discover-hosts``."""

from __future__ import annotations

import json

from click.testing import CliRunner
from sqlalchemy import select

from models import ComputeNode, HostMapping
from models.db import session_scope
from novaq.cli import main
from tests.factories import make_compute_node
from workflows import api


def _state(db_url: str) -> tuple[list[str], list[int]]:
    with session_scope(db_url) as session:
        hosts = sorted(session.scalars(select(HostMapping.host)))
        mapped = list(session.scalars(select(ComputeNode.mapped).order_by(ComputeNode.host)))
        return hosts, mapped


def test_discover_hosts_maps_new_compute_hosts_once(db_url: str) -> None:
    make_compute_node(db_url, "host2")
    make_compute_node(db_url, "host1")
    assert api.discover_hosts() == ["host1", "host2"]
    assert api.discover_hosts() == []
    assert _state(db_url) == (["host1", "host2"], [1, 1])


def test_discover_hosts_command_says_what_it_mapped(db_url: str) -> None:
    runner = CliRunner()
    make_compute_node(db_url, "host1")

    first = runner.invoke(main, ["discover-hosts"])
    assert first.exit_code == 0, first.output
    assert first.output == "Mapped compute host host1 to cell cell1.\n"

    again = runner.invoke(main, ["discover-hosts"])
    assert again.output == "No unmapped compute hosts found.\n"

    make_compute_node(db_url, "host2")
    as_json = runner.invoke(main, ["discover-hosts", "--json"])
    assert json.loads(as_json.output) == ["host2"]
    assert _state(db_url) == (["host1", "host2"], [1, 1])
