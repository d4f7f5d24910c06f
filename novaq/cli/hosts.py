"""``novaq`` commands for what runs where: ``hypervisor-show``, ``hypervisor-servers``
and ``availability-zone-list``."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table
from rich.text import Text

from novaq.cli.base import api, console, handle_errors, json_option, main, render

SHOW_COLUMNS = (
    "host",
    "node",
    "uuid",
    "hypervisor_type",
    "hypervisor_version",
    "host_ip",
    "state",
    "status",
    "disabled_reason",
    "forced_down",
    "availability_zone",
    "aggregates",
    "vcpus",
    "vcpus_used",
    "memory_mb",
    "memory_mb_used",
    "local_gb",
    "local_gb_used",
    "free_ram_mb",
    "free_disk_gb",
    "running_vms",
    "cpu_allocation_ratio",
    "ram_allocation_ratio",
    "disk_allocation_ratio",
)
SERVER_COLUMNS = ("uuid", "name", "status", "task_state", "flavor", "host", "node")
PCI_COLUMNS = ("address", "vendor_id", "product_id", "alias", "status", "instance_uuid")


@main.command("hypervisor-show")
@click.argument("hypervisor")
@json_option
@handle_errors
def hypervisor_show(hypervisor: str, as_json: bool) -> None:
    """A hypervisor (host, node name or uuid): resources used and total, PCI devices and
    their state, and its servers."""
    view = api().show_hypervisor(hypervisor)
    if as_json:
        click.echo(json.dumps(view, indent=2, default=str))
        return
    render(view, SHOW_COLUMNS, False, title=f"Hypervisor {view['node']}")
    render(view["pci_devices"], PCI_COLUMNS, False, title="PCI devices")
    render(view["servers"], SERVER_COLUMNS, False, title="Servers")


@main.command("hypervisor-servers")
@click.argument("hypervisor")
@json_option
@handle_errors
def hypervisor_servers(hypervisor: str, as_json: bool) -> None:
    """The servers on a hypervisor (host, node name or uuid)."""
    render(api().list_hypervisor_servers(hypervisor), SERVER_COLUMNS, as_json)


@main.command("availability-zone-list")
@click.option("--long", "long_", is_flag=True, help="Also each zone's hosts and services.")
@json_option
@handle_errors
def availability_zone_list(long_: bool, as_json: bool) -> None:
    """Availability zones and whether they are available; with --long, as nova's, each
    zone's hosts and their enabled services (:-) up, XXX down) since when."""
    zones = api().list_availability_zones()
    if as_json:
        click.echo(json.dumps(zones, indent=2, default=str))
        return
    table = Table("Name", "Status", title="Availability zones")
    for zone in zones:
        if not long_ and zone["name"] == "internal":
            continue  # nova shows the internal zone to an operator asking for it only
        table.add_row(Text(zone["name"]), "available" if zone["available"] else "not available")
        if long_:
            _add_hosts(table, zone["hosts"] or {})
    console.print(table)


def _add_hosts(table: Table, hosts: dict[str, dict[str, Any]]) -> None:
    for host, services in sorted(hosts.items()):
        table.add_row(Text(f"|- {host}"), "")
        for binary, state in sorted(services.items()):
            alive = ":-)" if state["available"] else "XXX"
            enabled = "enabled" if state["active"] else "disabled"
            table.add_row(Text(f"| |- {binary}"), Text(f"{enabled} {alive} {state['updated_at']}"))
