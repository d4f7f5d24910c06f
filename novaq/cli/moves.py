"""``novaq`` commands for moves (resize, resize-confirm, resize-revert, migrate,
migration-list)."""

from __future__ import annotations

import click

from novaq.cli.base import api, handle_errors, json_option, main, render


def _accepted(verb: str, uuid: str, request_id: str) -> None:
    click.echo(f"Request to {verb} server {uuid} has been accepted ({request_id}).")


def _wait(uuid: str, status: str, wait_s: float | None, request_id: str) -> None:
    """Wait for the request's end: ``status``, or its fault as soon as it failed."""
    if wait_s is not None:
        api().wait(uuid, status, timeout=wait_s, request_id=request_id)


def _settled_status(uuid: str) -> str:
    """What a confirm or a revert leaves the server as: SHUTOFF when its guest is off
    (a server stopped before the move stays stopped, as Nova's confirm and revert keep
    it), else ACTIVE."""
    return "SHUTOFF" if api().show(uuid)["power_state_name"] == "shutdown" else "ACTIVE"


wait_option = click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=None,
    help="Wait up to N s for the resulting status; a failure ends the wait at once.",
)


@main.command()
@click.argument("uuid")
@click.argument("flavor")
@wait_option
@handle_errors
def resize(uuid: str, flavor: str, wait_s: float | None) -> None:
    """Resize a server to FLAVOR (it then waits in VERIFY_RESIZE)."""
    request_id = api().resize(uuid, flavor)
    _accepted("resize", uuid, request_id)
    _wait(uuid, "VERIFY_RESIZE", wait_s, request_id)


@main.command("resize-confirm")
@click.argument("uuid")
@wait_option
@handle_errors
def resize_confirm(uuid: str, wait_s: float | None) -> None:
    """Confirm a resize or migration (then ACTIVE, or SHUTOFF for a stopped server)."""
    settled = _settled_status(uuid) if wait_s is not None else "ACTIVE"
    request_id = api().confirm_resize(uuid)
    _accepted("confirm the resize of", uuid, request_id)
    _wait(uuid, settled, wait_s, request_id)


@main.command("resize-revert")
@click.argument("uuid")
@wait_option
@handle_errors
def resize_revert(uuid: str, wait_s: float | None) -> None:
    """Revert a resize or migration (then ACTIVE, or SHUTOFF for a stopped server)."""
    settled = _settled_status(uuid) if wait_s is not None else "ACTIVE"
    request_id = api().revert_resize(uuid)
    _accepted("revert the resize of", uuid, request_id)
    _wait(uuid, settled, wait_s, request_id)


@main.command()
@click.argument("uuid")
@click.option("--host", default=None, help="Target host (admin).")
@wait_option
@handle_errors
def migrate(uuid: str, host: str | None, wait_s: float | None) -> None:
    """Cold-migrate a server to another host."""
    request_id = api().migrate(uuid, host=host)
    _accepted("migrate", uuid, request_id)
    _wait(uuid, "VERIFY_RESIZE", wait_s, request_id)


@main.command("migration-list")
@click.option("--instance", "instance_uuid", default=None)
@click.option("--host", default=None)
@click.option("--status", default=None)
@json_option
@handle_errors
def migration_list(
    instance_uuid: str | None, host: str | None, status: str | None, as_json: bool
) -> None:
    """List migrations."""
    filters = {
        k: v for k, v in (("instance_uuid", instance_uuid), ("host", host), ("status", status)) if v
    }
    render(
        api().list_migrations(**filters),
        (
            "uuid",
            "instance_uuid",
            "migration_type",
            "status",
            "source_compute",
            "dest_compute",
            "old_flavor",
            "new_flavor",
        ),
        as_json,
    )
