"""``novaq`` commands that change what a server is called and carries: ``update``
(name, description), ``rename`` and ``meta`` (set/delete metadata), as the nova client's
``update``, ``rename`` and ``meta``. Each prints the server as it now is."""

from __future__ import annotations

import click

from novaq.cli.base import api, handle_errors, json_option, main, parse_pairs, render
from novaq.cli.servers import SHOW_COLUMNS


@main.command()
@click.argument("server")
@click.option("--name", default=None, help="The server's new name.")
@click.option("--description", default=None, help="The new description ('' clears it).")
@json_option
@handle_errors
def update(server: str, name: str | None, description: str | None, as_json: bool) -> None:
    """Update a server's name or description."""
    if name is None and description is None:
        raise click.UsageError("give --name or --description (or both)")
    render(api().update(server, name=name, description=description), SHOW_COLUMNS, as_json)


@main.command()
@click.argument("server")
@click.argument("name")
@json_option
@handle_errors
def rename(server: str, name: str, as_json: bool) -> None:
    """Rename a server."""
    render(api().update(server, name=name), SHOW_COLUMNS, as_json)


@main.command()
@click.argument("server")
@click.argument("action", type=click.Choice(["set", "delete"]))
@click.argument("items", nargs=-1, required=True, metavar="KEY=VALUE|KEY ...")
@json_option
@handle_errors
def meta(server: str, action: str, items: tuple[str, ...], as_json: bool) -> None:
    """Set or delete a server's metadata: ``meta vm set a=1 b=2``, ``meta vm delete a``."""
    change: dict[str, str | None]
    if action == "set":
        change = dict(parse_pairs(items, "KEY=VALUE"))
    else:
        # A KEY=VALUE given to delete names its key, as the nova client reads it.
        change = {item.partition("=")[0]: None for item in items}
    render(api().update(server, metadata=change), SHOW_COLUMNS, as_json)
