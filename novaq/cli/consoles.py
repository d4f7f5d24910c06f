"""``novaq console-url``: a console URL for a server (the nova client's
``console-url-show``). The URL carries a secret token valid for ``[consoleauth]
token_ttl`` seconds; it is printed once and never stored. ``novaq console-log``: the
tail of a server's console log, as the host read it."""

from __future__ import annotations

import datetime as dt

import click

from novaq.cli.base import api, handle_errors, json_option, main, render


@main.command("console-url")
@click.argument("server")
@click.option("--type", "console_type", default="serial", show_default=True, help="Console type.")
@json_option
@handle_errors
def console_url(server: str, console_type: str, as_json: bool) -> None:
    """Print a console URL for SERVER (a name or a uuid)."""
    console = api().get_console(server, console_type=console_type)
    if not as_json:
        expires = dt.datetime.fromtimestamp(console["expires"], dt.UTC)
        console = {**console, "expires": f"{expires.isoformat()} ({console['expires']})"}
    render(console, ("type", "url", "expires"), as_json)


@main.command("console-log")
@click.argument("server")
@click.option("--length", type=click.IntRange(min=0), default=None, help="Only the last N lines.")
@handle_errors
def console_log(server: str, length: int | None) -> None:
    """Print the tail of SERVER's console log (the nova client's ``console-log``)."""
    click.echo(api().console_log(server, length=length), nl=False)
