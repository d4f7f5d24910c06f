"""``novaq`` commands for a flavor after create: ``flavor-show``, ``flavor-delete``,
``flavor-key`` and ``flavor-access-*`` (``flavor-create`` and ``flavor-list`` are with
the servers' commands)."""

from __future__ import annotations

import click
from rich.markup import escape

from novaq.cli.base import api, console, handle_errors, json_option, main, render
from novaq.cli.servers import FLAVOR_COLUMNS

ACCESS_COLUMNS = ("flavor_id", "tenant_id")


@main.command("flavor-show")
@click.argument("flavor")
@json_option
@handle_errors
def flavor_show(flavor: str, as_json: bool) -> None:
    """Show a flavor (by name or id)."""
    render(api().show_flavor(flavor), FLAVOR_COLUMNS, as_json)


@main.command("flavor-delete")
@click.argument("flavor")
@handle_errors
def flavor_delete(flavor: str) -> None:
    """Delete a flavor (by name or id). Servers built with it keep their copy of it."""
    deleted = api().delete_flavor(flavor)
    console.print(f"Deleted flavor {escape(deleted['name'])} ({escape(deleted['id'])})")


@main.command("flavor-key")
@click.argument("flavor")
@click.argument("action", type=click.Choice(["set", "unset"]))
@click.argument("items", nargs=-1, required=True, metavar="KEY=VALUE... | KEY...")
@json_option
@handle_errors
def flavor_key(flavor: str, action: str, items: tuple[str, ...], as_json: bool) -> None:
    """Set or unset extra specs of a flavor: ``set k=v ...`` or ``unset k ...``."""
    if action == "unset":
        view = api().unset_flavor_extra_specs(flavor, list(items))
    else:
        specs: dict[str, str] = {}
        for item in items:
            key, sep, value = item.partition("=")
            if not sep:
                raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="set")
            specs[key] = value
        view = api().set_flavor_extra_specs(flavor, specs)
    render(view, FLAVOR_COLUMNS, as_json)


@main.command("flavor-access-list")
@click.option("--flavor", required=True, help="A private flavor's name or id.")
@json_option
@handle_errors
def flavor_access_list(flavor: str, as_json: bool) -> None:
    """The projects that may use a private flavor."""
    render(api().list_flavor_access(flavor), ACCESS_COLUMNS, as_json)


@main.command("flavor-access-add")
@click.argument("flavor")
@click.argument("project")
@json_option
@handle_errors
def flavor_access_add(flavor: str, project: str, as_json: bool) -> None:
    """Let a project use a private flavor."""
    render(api().add_flavor_access(flavor, project), ACCESS_COLUMNS, as_json)


@main.command("flavor-access-remove")
@click.argument("flavor")
@click.argument("project")
@json_option
@handle_errors
def flavor_access_remove(flavor: str, project: str, as_json: bool) -> None:
    """Take a private flavor away from a project."""
    render(api().remove_flavor_access(flavor, project), ACCESS_COLUMNS, as_json)
