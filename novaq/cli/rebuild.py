"""``novaq`` commands for rebuild and evacuate (servers named by uuid or by name)."""

from __future__ import annotations

import click

from novaq.cli.base import api, handle_errors, main


def _server_uuid(server: str) -> str:
    """The uuid of ``server`` (a uuid or a name matching one live server), for ``--wait``."""
    api()  # binds this process to the cluster's settings first
    from models.db import session_scope
    from workflows.api import common

    with session_scope(common.db_url()) as session:
        return common.resolve_server(session, server)


def _wait(server: str, status: str, wait_s: float | None) -> None:
    if wait_s is None:
        return
    uuid = _server_uuid(server)
    view = api().wait(uuid, status, timeout=wait_s)
    click.echo(f"Server {uuid} is {view['status']} on {view['host']}.")


wait_option = click.option(
    "--wait", "wait_s", type=float, default=None, help="Wait up to N s for the server to settle."
)


@main.command()
@click.argument("server")
@click.option("--image", required=True, help="The new image (name or id).")
@wait_option
@handle_errors
def rebuild(server: str, image: str, wait_s: float | None) -> None:
    """Rebuild SERVER from a new image, on its host (a stopped server stays stopped)."""
    stopped = wait_s is not None and api().show(_server_uuid(server))["status"] == "SHUTOFF"
    request_id = api().rebuild(server, image)
    click.echo(f"Request to rebuild server {server} has been accepted ({request_id}).")
    _wait(server, "SHUTOFF" if stopped else "ACTIVE", wait_s)


@main.command()
@click.argument("server")
@click.option("--host", default=None, help="Target host (still checked by the scheduler).")
@wait_option
@handle_errors
def evacuate(server: str, host: str | None, wait_s: float | None) -> None:
    """Evacuate SERVER from its down host: rebuilt elsewhere through the scheduler."""
    stopped = wait_s is not None and api().show(_server_uuid(server))["status"] == "SHUTOFF"
    request_id = api().evacuate(server, host=host)
    click.echo(f"Request to evacuate server {server} has been accepted ({request_id}).")
    _wait(server, "SHUTOFF" if stopped else "ACTIVE", wait_s)
