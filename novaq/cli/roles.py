"""``novaq controller`` and ``novaq compute``: the roles of a cluster of many machines,
each run in the foreground from settings alone (``novaq/launcher/roles.py``), as a
systemd unit runs them (``deploy/``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from novaq.cli.base import handle_errors, main

state_dir_option = click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="This machine's own state directory: logs, beat's schedule, Flower's credential, "
    "instance directories and image cache (default: NOVAQ_STATE_DIR, else ./.novaq).",
)
follow_option = click.option(
    "--follow",
    is_flag=True,
    help="Also print every line of every process; by default they go to <state dir>/logs "
    "only, and only their errors are printed.",
)


def _settings(state_dir: Path | None) -> Any:
    # NOTE: load_settings, never get_settings: a role does not look for a `novaq up`
    # cluster's files (novaq.settings.find_local_cluster).
    from novaq.settings import load_settings

    return load_settings() if state_dir is None else load_settings(state_dir=state_dir)


@main.command()
@state_dir_option
@click.option(
    "--image-endpoint/--no-image-endpoint",
    default=True,
    show_default=True,
    help="Serve the image store to the compute hosts (`novaq image-endpoint`); leave it "
    "out when another machine serves [glance] api_servers.",
)
@click.option("--image-endpoint-address", help="Address the image endpoint listens on.")
@click.option(
    "--image-endpoint-port", type=click.IntRange(1, 65535), help="Its port (default 9292)."
)
@follow_option
@handle_errors
def controller(
    state_dir: Path | None,
    image_endpoint: bool,
    image_endpoint_address: str | None,
    image_endpoint_port: int | None,
    follow: bool,
) -> None:
    """Run this machine's controller in the foreground: the scheduler worker (as
    scheduler@<[DEFAULT] host>), celery beat (a standby while another controller's beat
    holds the lease; it takes over when that one dies), Flower and the image endpoint,
    each restarted when it dies. Needs NOVAQ_BROKER_URL and NOVAQ_DATABASE_URL, and a
    database brought up to date by `novaq db upgrade`. SIGTERM or Ctrl-C stops it."""
    from novaq.launcher.roles import Controller, ImageEndpoint

    endpoint = ImageEndpoint(image_endpoint_address, image_endpoint_port)
    role = Controller(
        _settings(state_dir), image_endpoint=endpoint if image_endpoint else None, follow=follow
    )
    sys.exit(role.run_forever())


@main.command()
@click.option(
    "--host",
    help="The compute host this machine is: its queue is compute.<host>, its node "
    "compute@<host> (default: [DEFAULT] host, NOVAQ_HOST, else the machine's name).",
)
@state_dir_option
@follow_option
@handle_errors
def compute(host: str | None, state_dir: Path | None, follow: bool) -> None:
    """Run one compute host's worker in the foreground, restarted when it dies. Needs
    NOVAQ_BROKER_URL and NOVAQ_DATABASE_URL, and nothing else from the controller: its
    instance directories and image cache live in its own state directory. SIGTERM or
    Ctrl-C stops it."""
    from novaq.launcher.roles import ComputeHost

    settings = _settings(state_dir)
    role = ComputeHost(settings, host if host is not None else settings.host, follow=follow)
    sys.exit(role.run_forever())
