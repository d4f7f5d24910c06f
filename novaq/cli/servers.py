"""``novaq`` commands for flavors and servers (the nova client's verbs)."""

from __future__ import annotations

from typing import Any

import click

from novaq.cli.base import api, handle_errors, json_option, main, render

# -- flavors -------------------------------------------------------------------------------

FLAVOR_COLUMNS = (
    "id",
    "name",
    "vcpus",
    "memory_mb",
    "root_gb",
    "ephemeral_gb",
    "swap",
    "extra_specs",
    "is_public",
)


@main.command("flavor-create")
@click.argument("name")
@click.option("--vcpus", type=int, required=True)
@click.option("--ram", "memory_mb", type=int, required=True, help="Memory in MB.")
@click.option("--disk", "root_gb", type=int, required=True, help="Root disk in GB.")
@click.option("--ephemeral", "ephemeral_gb", type=int, default=0, show_default=True)
@click.option("--swap", type=int, default=0, show_default=True, help="Swap in MB.")
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra spec, e.g. pci_passthrough:alias=QuadroM4000-video:1 (repeatable).",
)
@click.option("--private", is_flag=True, help="Only projects given access may use it.")
@json_option
@handle_errors
def flavor_create(
    name: str,
    vcpus: int,
    memory_mb: int,
    root_gb: int,
    ephemeral_gb: int,
    swap: int,
    properties: tuple[str, ...],
    private: bool,
    as_json: bool,
) -> None:
    """Create a flavor."""
    extra_specs = {}
    for prop in properties:
        key, sep, value = prop.partition("=")
        if not sep:
            raise click.BadParameter(f"{prop!r} is not KEY=VALUE", param_hint="--property")
        extra_specs[key] = value
    flavor = api().create_flavor(
        name, vcpus, memory_mb, root_gb, ephemeral_gb, swap, extra_specs, is_public=not private
    )
    render(flavor, FLAVOR_COLUMNS, as_json)


@main.command("flavor-list")
@click.option("--all", "all_", is_flag=True, help="Private flavors too (as nova's --all).")
@json_option
@handle_errors
def flavor_list(all_: bool, as_json: bool) -> None:
    """List flavors: the public ones, or every one with --all."""
    render(api().list_flavors(is_public=None if all_ else True), FLAVOR_COLUMNS, as_json)


# -- servers -------------------------------------------------------------------------------

LIST_COLUMNS = ("uuid", "name", "status", "task_state", "power_state_name", "host")
SHOW_COLUMNS = (
    "uuid",
    "name",
    "status",
    "vm_state",
    "task_state",
    "power_state_name",  # by name (the JSON keeps Nova's integer power_state too)
    "host",
    "node",
    "image",
    "flavor",
    "pci_devices",
    "created_at",
    "launched_at",
    "deleted_at",
    "fault",
)


@main.command()
@click.argument("name")
@click.option("--flavor", required=True)
@click.option("--image", default="cirros", show_default=True)
@click.option("--min-count", "count", type=int, default=1, show_default=True)
@click.option("--availability-zone")
@click.option("--wait", "wait_s", type=float, default=None, help="Wait up to N s for ACTIVE.")
@json_option
@handle_errors
def boot(
    name: str,
    flavor: str,
    image: str,
    count: int,
    availability_zone: str | None,
    wait_s: float | None,
    as_json: bool,
) -> None:
    """Boot servers."""
    uuids = api().boot(name, flavor, image, count=count, availability_zone=availability_zone)
    if wait_s is not None:
        rows = [api().wait(u, "ACTIVE", timeout=wait_s) for u in uuids]
    else:
        rows = [api().show(u) for u in uuids]
    render(rows, LIST_COLUMNS, as_json)


@main.command("list")
@click.option("--host")
@click.option("--status")
@click.option("--deleted", is_flag=True, help="Include deleted servers.")
@json_option
@handle_errors
def list_servers(host: str | None, status: str | None, deleted: bool, as_json: bool) -> None:
    """List servers."""
    filters: dict[str, Any] = {}
    if host:
        filters["host"] = host
    if status:
        filters["status"] = status
    if deleted:
        filters["deleted"] = True
    render(api().list_instances(**filters), LIST_COLUMNS, as_json)


@main.command()
@click.argument("uuid")
@json_option
@handle_errors
def show(uuid: str, as_json: bool) -> None:
    """Show a server."""
    render(api().show(uuid), SHOW_COLUMNS, as_json)


@main.command()
@click.argument("uuids", nargs=-1, required=True)
@click.option("--wait", "wait_s", type=float, default=None, help="Wait up to N s for DELETED.")
@handle_errors
def delete(uuids: tuple[str, ...], wait_s: float | None) -> None:
    """Delete servers."""
    for uuid in uuids:
        request_id = api().delete(uuid)
        click.echo(f"Request to delete server {uuid} has been accepted ({request_id}).")
    if wait_s is not None:
        for uuid in uuids:
            api().wait(uuid, "DELETED", timeout=wait_s)


@main.command()
@click.argument("uuid")
@json_option
@handle_errors
def diagnostics(uuid: str, as_json: bool) -> None:
    """The host's live view of a server's guest."""
    render(
        api().diagnostics(uuid),
        ("uuid", "name", "power_state", "vcpus", "memory_mb", "pci_addresses", "xml"),
        as_json,
    )


@main.command("instance-action-list")
@click.argument("uuid")
@json_option
@handle_errors
def instance_action_list(uuid: str, as_json: bool) -> None:
    """List a server's actions and their events."""
    actions = api().list_actions(uuid)
    if as_json:
        render(actions, (), True)
        return
    rows = [
        {**a, "events": ", ".join(f"{e['event']}={e['result']}" for e in a["events"])}
        for a in actions
    ]
    render(rows, ("action", "request_id", "start_time", "finish_time", "message", "events"), False)
