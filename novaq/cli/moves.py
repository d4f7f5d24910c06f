"""``novaq`` commands for moves (resize, resize-confirm, resize-revert, migrate,
migration-list)."""

from __future__ import annotations

import click

from novaq.cli.base import api, handle_errors, json_option, main, render


def _accepted(verb: str, uuid: str, request_id: str) -> None:
    click.echo(f"Request to {verb} server {uuid} has been accepted ({request_id}).")


def _wait(uuid: str, status: str, wait_s: float | None) -> None:
    if wait_s is not None:
        api().wait(uuid, status, timeout=wait_s)


wait_option = click.option(
    "--wait", "wait_s", type=float, default=None, help="Wait up to N s for the resulting status."
)


@main.command()
@click.argument("uuid")
@click.argument("flavor")
@wait_option
@handle_errors
def resize(uuid: str, flavor: str, wait_s: float | None) -> None:
    """Resize a server to FLAVOR (it then waits in VERIFY_RESIZE)."""
    _accepted("resize", uuid, api().resize(uuid, flavor))
    _wait(uuid, "VERIFY_RESIZE", wait_s)


@main.command("resize-confirm")
@click.argument("uuid")
@handle_errors
def resize_confirm(uuid: str) -> None:
    """Confirm a resize or migration."""
    _accepted("confirm the resize of", uuid, api().confirm_resize(uuid))


@main.command("resize-revert")
@click.argument("uuid")
@handle_errors
def resize_revert(uuid: str) -> None:
    """Revert a resize or migration."""
    _accepted("revert the resize of", uuid, api().revert_resize(uuid))


@main.command()
@click.argument("uuid")
@click.option("--host", default=None, help="Target host (admin).")
@wait_option
@handle_errors
def migrate(uuid: str, host: str | None, wait_s: float | None) -> None:
    """Cold-migrate a server to another host."""
    _accepted("migrate", uuid, api().migrate(uuid, host=host))
    _wait(uuid, "VERIFY_RESIZE", wait_s)


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
