"""``novaq`` commands for flavors and servers (the nova client's verbs)."""

from __future__ import annotations

import sys
from typing import Any

import click

from novaq.cli.base import (
    api,
    handle_errors,
    json_option,
    main,
    on_each,
    parse_pairs,
    render,
    report_error,
)
from novaq.exceptions import NovaqError

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
    extra_specs = parse_pairs(properties, "--property")
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

#: The list's columns, as ``nova list``/``openstack server list`` show them.
LIST_COLUMNS = (
    "uuid",
    "name",
    "status",
    "task_state",
    "power_state_name",
    "host",
    "image_name",
    "flavor_name",
    "tenant_id",
    "user_id",
)
SHOW_COLUMNS = (
    "uuid",
    "name",
    "description",
    "tenant_id",
    "user_id",
    "status",
    "vm_state",
    "task_state",
    "power_state_name",  # by name (the JSON keeps Nova's integer power_state too)
    "host",
    "node",
    "image",
    "image_name",
    "flavor",
    "metadata",
    "locked",
    "locked_reason",
    "pci_devices",
    "created_at",
    "launched_at",
    "deleted_at",
    "fault",
)
#: Hints that may be given several times, each time one more server.
LIST_HINTS = ("same_host", "different_host")


def hints_of(items: tuple[str, ...]) -> dict[str, Any]:
    """``--hint KEY=VALUE`` as the API's hints: a server-list hint collects every value
    given, any other hint takes the last (an unknown one is refused by the API)."""
    hints: dict[str, Any] = {}
    for item in items:
        key, value = next(iter(parse_pairs([item], "--hint").items()))
        if key in LIST_HINTS:
            hints.setdefault(key, []).append(value)
        else:
            hints[key] = value
    return hints


@main.command()
@click.argument("name")
@click.option("--flavor", required=True)
@click.option("--image", default="cirros", show_default=True)
@click.option("--min-count", type=int, default=None, help="Boot at least N servers (default 1).")
@click.option(
    "--max-count", type=int, default=None, help="Boot up to N servers (default: --min-count)."
)
@click.option("--availability-zone")
@click.option("--group", default=None, help="Server group (uuid or name) to boot into.")
@click.option(
    "--hint",
    "hints",
    multiple=True,
    metavar="KEY=VALUE",
    help="Scheduler hint: same_host, different_host (a server, repeatable), group, "
    "query (JsonFilter's JSON text), build_near_host_ip or cidr (SimpleCIDRAffinityFilter).",
)
@click.option(
    "--property",
    "--meta",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="Server metadata (repeatable).",
)
@click.option("--description", default=None, help="The servers' description.")
@click.option(
    "--project",
    default=None,
    help="The project booting and owning the servers (default: demo; private flavors need"
    " its access).",
)
@click.option("--user", default=None, help="The user owning the servers (default: demo).")
@click.option("--wait", "wait_s", type=float, default=None, help="Wait up to N s for ACTIVE.")
@json_option
@handle_errors
def boot(
    name: str,
    flavor: str,
    image: str,
    min_count: int | None,
    max_count: int | None,
    availability_zone: str | None,
    group: str | None,
    hints: tuple[str, ...],
    properties: tuple[str, ...],
    description: str | None,
    project: str | None,
    user: str | None,
    wait_s: float | None,
    as_json: bool,
) -> None:
    """Boot servers (several are named NAME-1, NAME-2, ...). With ``--wait``, waits for
    every one; those that fail are reported and the command exits 1 at the end."""
    uuids = api().boot(
        name,
        flavor,
        image,
        min_count=min_count,
        max_count=max_count,
        availability_zone=availability_zone,
        group=group,
        hints=hints_of(hints) or None,
        metadata=parse_pairs(properties, "--property") or None,
        description=description,
        project=project,
        user=user,
    )
    rows, failed = [], 0
    for uuid in uuids:
        try:
            rows.append(api().show(uuid) if wait_s is None else api().wait(uuid, "ACTIVE", wait_s))
        except NovaqError as exc:
            report_error(exc, f"boot {uuid}: ")
            rows.append(api().show(uuid))
            failed += 1
    render(rows, LIST_COLUMNS, as_json)
    if failed:
        sys.exit(1)


@main.command("list")
@click.option("--name", default=None, help="Only servers whose name matches this regex.")
@click.option("--status", default=None, help="Only servers in this status (ACTIVE, ERROR...).")
@click.option("--host", default=None)
@click.option("--flavor", default=None, help="Only servers of this flavor (name or id).")
@click.option("--deleted", is_flag=True, help="Only deleted servers.")
@click.option("--locked/--unlocked", default=None, help="Only locked (or only unlocked) servers.")
@click.option("--limit", type=int, default=None, help="At most N servers.")
@click.option("--marker", default=None, help="Start after the server with this uuid.")
@json_option
@handle_errors
def list_servers(
    name: str | None,
    status: str | None,
    host: str | None,
    flavor: str | None,
    deleted: bool,
    locked: bool | None,
    limit: int | None,
    marker: str | None,
    as_json: bool,
) -> None:
    """List servers, oldest first."""
    given = {
        "name": name,
        "status": status,
        "host": host,
        "flavor": flavor,
        "locked": locked,
        "limit": limit,
        "marker": marker,
    }
    filters: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if deleted:
        filters["deleted"] = True
    render(api().list_instances(**filters), LIST_COLUMNS, as_json)


@main.command()
@click.argument("server")
@json_option
@handle_errors
def show(server: str, as_json: bool) -> None:
    """Show a server (by uuid or name)."""
    render(api().show(server), SHOW_COLUMNS, as_json)


@main.command()
@click.argument("servers", nargs=-1, required=True)
@click.option("--wait", "wait_s", type=float, default=None, help="Wait up to N s for DELETED.")
@handle_errors
def delete(servers: tuple[str, ...], wait_s: float | None) -> None:
    """Delete servers."""
    on_each("delete", servers, api().delete, "DELETED", wait_s)


@main.command()
@click.argument("server")
@json_option
@handle_errors
def diagnostics(server: str, as_json: bool) -> None:
    """The host's live view of a server's guest."""
    render(
        api().diagnostics(server),
        ("uuid", "name", "power_state_name", "vcpus", "memory_mb", "pci_addresses", "xml"),
        as_json,
    )


@main.command("instance-action-list")
@click.argument("server")
@json_option
@handle_errors
def instance_action_list(server: str, as_json: bool) -> None:
    """List a server's actions and their events."""
    actions = api().list_actions(server)
    if as_json:
        render(actions, (), True)
        return
    rows = [
        {**a, "events": ", ".join(f"{e['event']}={e['result']}" for e in a["events"])}
        for a in actions
    ]
    render(rows, ("action", "request_id", "start_time", "finish_time", "message", "events"), False)
