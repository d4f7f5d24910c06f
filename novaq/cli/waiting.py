"""``novaq wait``: wait for a server to reach a status, or for its operation to end."""

from __future__ import annotations

import click

from novaq.cli.base import api, handle_errors, json_option, main, render

COLUMNS = ("uuid", "name", "status", "task_state", "power_state_name", "host")


@main.command("wait")
@click.argument("uuid")
@click.argument("status")
@click.option(
    "--timeout", type=click.FloatRange(min=0), default=120.0, show_default=True, help="Seconds."
)
@click.option(
    "--request-id", default=None, help="The request to watch (default: the server's latest)."
)
@json_option
@handle_errors
def wait(uuid: str, status: str, timeout: float, request_id: str | None, as_json: bool) -> None:
    """Wait until a server shows STATUS (ACTIVE, SHUTOFF, VERIFY_RESIZE, …); fail at once,
    with the fault, when its operation ends without it."""
    render(api().wait(uuid, status, timeout=timeout, request_id=request_id), COLUMNS, as_json)
