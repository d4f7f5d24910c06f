"""``novaq discover-hosts``: map the compute hosts not yet mapped to the cell (Nova's
``nova-manage cell_v2 discover_hosts``); the scheduler's periodic
``_discover_hosts_in_cells`` does the same when
``[scheduler] discover_hosts_in_cells_interval`` is set."""

from __future__ import annotations

import json

import click

from novaq.cli.base import api, handle_errors, json_option, main


@main.command("discover-hosts")
@json_option
@handle_errors
def discover_hosts(as_json: bool) -> None:
    """Map every compute host without a host mapping to cell1."""
    hosts = api().discover_hosts()
    if as_json:
        click.echo(json.dumps(hosts))
        return
    if not hosts:
        click.echo("No unmapped compute hosts found.")
    for host in hosts:
        click.echo(f"Mapped compute host {host} to cell cell1.")
