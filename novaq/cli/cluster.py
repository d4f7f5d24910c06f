"""``novaq`` commands for the database and a local cluster (``db``, ``up``, ``demo``)."""

from __future__ import annotations

import sys

import click

from novaq.cli.base import console, handle_errors, main

# -- database ------------------------------------------------------------------------------


@main.group()
def db() -> None:
    """Database schema (Alembic)."""


@db.command("upgrade")
@click.option("--url", help="Database URL (default: NOVAQ_DATABASE_URL or the state dir's SQLite).")
@handle_errors
def db_upgrade(url: str | None) -> None:
    """Apply every migration to SQLite, PostgreSQL or MariaDB."""
    from models.migrate import current, upgrade
    from novaq.settings import load_settings

    target = url or load_settings().sqlalchemy_url
    upgrade(target)
    click.echo(f"database at revision {current(target)}")


# -- local cluster -------------------------------------------------------------------------


@main.command()
@click.option(
    "--hosts",
    "n_hosts",
    type=click.IntRange(1, 64),
    default=2,
    show_default=True,
    help="Simulated compute hosts, when the settings declare none.",
)
@click.option(
    "--follow",
    is_flag=True,
    help="Also print every line of every process (worker banners and task logs); by "
    "default they go to <state dir>/logs only, and only their errors are printed.",
)
@handle_errors
def up(n_hosts: int, follow: bool) -> None:
    """Run a whole cluster in the foreground: broker (embedded unless NOVAQ_BROKER_URL),
    scheduler, one compute worker per host, beat and Flower, each restarted when it dies.
    Prints one "cluster ready" line, with Flower's URL, once everything answers. Ctrl-C
    stops it cleanly."""
    from novaq.launcher.cluster import Cluster
    from novaq.settings import load_settings

    cluster = Cluster(load_settings(), n_hosts=n_hosts, follow=follow)
    sys.exit(cluster.run_forever())


@main.command()
@click.option("--hosts", "n_hosts", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--servers", "n_servers", type=click.IntRange(1, 100), default=6, show_default=True)
@click.option("--keep/--no-keep", default=False, help="Keep the cluster running afterwards.")
@handle_errors
def demo(n_hosts: int, n_servers: int, keep: bool) -> None:
    """Start a local cluster and boot servers across its hosts, with progress."""
    from novaq.launcher.demo import run_demo

    sys.exit(run_demo(n_hosts=n_hosts, n_servers=n_servers, keep=keep, console=console))
