"""The ``novaq`` command: the nova client's verbs plus ``up``, ``demo`` and ``db``.

Each command parses its arguments, calls one function of ``workflows.api`` (or the cluster
launcher) and renders the result; a ``novaq`` error becomes one red line and exit code 1.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from novaq.exceptions import NovaqError

F = TypeVar("F", bound=Callable[..., Any])
console = Console()
err_console = Console(stderr=True)


def handle_errors(func: F) -> F:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except NovaqError as exc:
            err_console.print(f"[bold red]ERROR ({type(exc).__name__}):[/] {escape(str(exc))}")
            sys.exit(1)

    return wrapper  # type: ignore[return-value]


def find_local_cluster() -> None:
    """Point this process at a ``novaq up`` cluster running from the same state directory:
    its embedded broker's URL file and its cluster config, unless the environment already
    names a broker or a config."""
    from novaq.settings import get_settings, load_settings

    state_dir = load_settings().state_dir.resolve()
    url_file = state_dir / "broker" / "url"
    config = state_dir / "cluster.toml"
    if "NOVAQ_BROKER_URL" not in os.environ and url_file.is_file():
        os.environ["NOVAQ_BROKER_URL"] = url_file.read_text().strip()
    if "NOVAQ_CONFIG" not in os.environ and config.is_file():
        os.environ["NOVAQ_CONFIG"] = str(config)
    get_settings.cache_clear()


@functools.cache
def api() -> Any:
    # Imported late: the API binds to the settings of the environment at first use.
    find_local_cluster()
    from workflows import api as public_api

    return public_api


def render(
    rows: Sequence[dict[str, Any]] | dict[str, Any],
    columns: Iterable[str],
    as_json: bool,
    title: str | None = None,
) -> None:
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    if isinstance(rows, dict):
        table = Table("Property", "Value", title=title)
        for key in columns:
            table.add_row(key, _cell(rows.get(key)))
    else:
        cols = list(columns)
        table = Table(*cols, title=title)
        for row in rows:
            table.add_row(*(_cell(row.get(c)) for c in cols))
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def main() -> None:
    """novaq: the compute side of a Nova-style cloud, on Celery."""


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
    as_json: bool,
) -> None:
    """Create a flavor."""
    extra_specs = {}
    for prop in properties:
        key, sep, value = prop.partition("=")
        if not sep:
            raise click.BadParameter(f"{prop!r} is not KEY=VALUE", param_hint="--property")
        extra_specs[key] = value
    flavor = api().create_flavor(name, vcpus, memory_mb, root_gb, ephemeral_gb, swap, extra_specs)
    render(flavor, FLAVOR_COLUMNS, as_json)


@main.command("flavor-list")
@json_option
@handle_errors
def flavor_list(as_json: bool) -> None:
    """List flavors."""
    render(api().list_flavors(), FLAVOR_COLUMNS, as_json)


# -- servers -------------------------------------------------------------------------------

LIST_COLUMNS = ("uuid", "name", "status", "task_state", "power_state_name", "host")
SHOW_COLUMNS = (
    "uuid",
    "name",
    "status",
    "vm_state",
    "task_state",
    "power_state",
    "host",
    "node",
    "image",
    "flavor",
    "pci_devices",
    "created_at",
    "launched_at",
    "deleted_at",
    "fault",
)


@main.command()
@click.argument("name")
@click.option("--flavor", required=True)
@click.option("--image", default="cirros", show_default=True)
@click.option("--min-count", "count", type=int, default=1, show_default=True)
@click.option("--availability-zone")
@click.option("--wait", "wait_s", type=float, default=None, help="Wait up to N s for ACTIVE.")
@json_option
@handle_errors
def boot(
    name: str,
    flavor: str,
    image: str,
    count: int,
    availability_zone: str | None,
    wait_s: float | None,
    as_json: bool,
) -> None:
    """Boot servers."""
    uuids = api().boot(name, flavor, image, count=count, availability_zone=availability_zone)
    if wait_s is not None:
        rows = [api().wait(u, "ACTIVE", timeout=wait_s) for u in uuids]
    else:
        rows = [api().show(u) for u in uuids]
    render(rows, LIST_COLUMNS, as_json)


@main.command("list")
@click.option("--host")
@click.option("--status")
@click.option("--deleted", is_flag=True, help="Include deleted servers.")
@json_option
@handle_errors
def list_servers(host: str | None, status: str | None, deleted: bool, as_json: bool) -> None:
    """List servers."""
    filters: dict[str, Any] = {}
    if host:
        filters["host"] = host
    if status:
        filters["status"] = status
    if deleted:
        filters["deleted"] = True
    render(api().list_instances(**filters), LIST_COLUMNS, as_json)


@main.command()
@click.argument("uuid")
@json_option
@handle_errors
def show(uuid: str, as_json: bool) -> None:
    """Show a server."""
    render(api().show(uuid), SHOW_COLUMNS, as_json)


@main.command()
@click.argument("uuids", nargs=-1, required=True)
@click.option("--wait", "wait_s", type=float, default=None, help="Wait up to N s for DELETED.")
@handle_errors
def delete(uuids: tuple[str, ...], wait_s: float | None) -> None:
    """Delete servers."""
    for uuid in uuids:
        request_id = api().delete(uuid)
        click.echo(f"Request to delete server {uuid} has been accepted ({request_id}).")
    if wait_s is not None:
        for uuid in uuids:
            api().wait(uuid, "DELETED", timeout=wait_s)


@main.command()
@click.argument("uuid")
@json_option
@handle_errors
def diagnostics(uuid: str, as_json: bool) -> None:
    """The host's live view of a server's guest."""
    render(
        api().diagnostics(uuid),
        ("uuid", "name", "power_state", "vcpus", "memory_mb", "pci_addresses", "xml"),
        as_json,
    )


@main.command("instance-action-list")
@click.argument("uuid")
@json_option
@handle_errors
def instance_action_list(uuid: str, as_json: bool) -> None:
    """List a server's actions and their events."""
    actions = api().list_actions(uuid)
    if as_json:
        render(actions, (), True)
        return
    rows = [
        {**a, "events": ", ".join(f"{e['event']}={e['result']}" for e in a["events"])}
        for a in actions
    ]
    render(rows, ("action", "request_id", "start_time", "finish_time", "message", "events"), False)


# -- hosts and services --------------------------------------------------------------------


@main.command("service-list")
@json_option
@handle_errors
def service_list(as_json: bool) -> None:
    """List services with their state (up/down) and status (enabled/disabled)."""
    render(
        api().list_services(),
        (
            "id",
            "binary",
            "host",
            "status",
            "state",
            "forced_down",
            "report_count",
            "last_seen_up",
            "disabled_reason",
        ),
        as_json,
    )


@main.command("hypervisor-list")
@json_option
@handle_errors
def hypervisor_list(as_json: bool) -> None:
    """List compute nodes and their usage."""
    render(
        api().list_hosts(),
        (
            "host",
            "node",
            "state",
            "status",
            "vcpus",
            "vcpus_used",
            "memory_mb",
            "memory_mb_used",
            "local_gb",
            "local_gb_used",
            "running_vms",
        ),
        as_json,
    )


@main.command("aggregate-create")
@click.argument("name")
@click.argument("availability_zone", required=False)
@json_option
@handle_errors
def aggregate_create(name: str, availability_zone: str | None, as_json: bool) -> None:
    """Create a host aggregate, optionally an availability zone."""
    render(api().create_aggregate(name, availability_zone), AGGREGATE_COLUMNS, as_json)


AGGREGATE_COLUMNS = ("id", "name", "availability_zone", "hosts", "metadata")


@main.command("aggregate-add-host")
@click.argument("aggregate_id", type=int)
@click.argument("host")
@json_option
@handle_errors
def aggregate_add_host(aggregate_id: int, host: str, as_json: bool) -> None:
    """Add a compute host to an aggregate."""
    render(api().add_host_to_aggregate(aggregate_id, host), AGGREGATE_COLUMNS, as_json)


@main.command("aggregate-set-metadata")
@click.argument("aggregate_id", type=int)
@click.argument("items", nargs=-1, required=True, metavar="KEY=VALUE|KEY")
@json_option
@handle_errors
def aggregate_set_metadata(aggregate_id: int, items: tuple[str, ...], as_json: bool) -> None:
    """Set aggregate metadata (a bare KEY removes it)."""
    metadata: dict[str, str | None] = {}
    for item in items:
        key, sep, value = item.partition("=")
        metadata[key] = value if sep else None
    render(api().set_aggregate_metadata(aggregate_id, metadata), AGGREGATE_COLUMNS, as_json)


@main.command("aggregate-list")
@json_option
@handle_errors
def aggregate_list(as_json: bool) -> None:
    """List aggregates."""
    render(api().list_aggregates(), AGGREGATE_COLUMNS, as_json)


@main.command("server-group-create")
@click.argument("name")
@click.argument(
    "policy",
    type=click.Choice(["affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity"]),
)
@click.option("--max-server-per-host", type=int, default=None)
@json_option
@handle_errors
def server_group_create(
    name: str, policy: str, max_server_per_host: int | None, as_json: bool
) -> None:
    """Create a server group."""
    rules = {"max_server_per_host": max_server_per_host} if max_server_per_host else None
    render(
        api().create_server_group(name, policy, rules),
        ("id", "name", "policy", "rules", "members"),
        as_json,
    )


@main.command("server-group-list")
@json_option
@handle_errors
def server_group_list(as_json: bool) -> None:
    """List server groups."""
    render(api().list_server_groups(), ("id", "name", "policy", "rules", "members"), as_json)


@main.command("audit")
@json_option
@handle_errors
def audit_command(as_json: bool) -> None:
    """Check the accounting: exit 3 when a leak is found (as nova-manage placement audit)."""
    report = api().audit()
    if as_json:
        click.echo(json.dumps(report, indent=2, default=str))
    else:
        _print_audit(report)
    sys.exit(3 if report["leaks"] else 0)


def _print_audit(report: dict[str, Any]) -> None:
    table = Table(
        "host/node",
        "by allocations",
        "by instances+moves",
        "by hypervisor",
        "capacity",
        "leaks",
        title="Accounting audit",
    )
    for node in report["nodes"]:
        usage = node["usage"]
        table.add_row(
            f"{node['host']}/{node['node']}",
            _resources(usage["allocations"]),
            _resources(usage["instances_and_migrations"]),
            _resources(usage["hypervisor"]) if usage["hypervisor"] else "unavailable",
            _resources({rc: int(v) for rc, v in node["capacity"].items()}),
            str(node["leaks"]),
        )
    console.print(table)
    for node in report["nodes"]:
        for note in node["overcommit"]:
            console.print(f"[yellow]overcommit[/] {node['host']}: {escape(note)}")
        for f in node["discrepancies"]:
            colour = "red" if f["severity"] == "leak" else "yellow"
            console.print(
                f"[{colour}]{f['severity']}[/] {node['host']} {f['kind']} "
                f"{f['consumer'] or ''}: {f['detail']}"
            )
    verdict = "[red]LEAKS FOUND[/]" if report["leaks"] else "[green]no leak[/]"
    console.print(f"{verdict}: {report['leaks']} accounting discrepancies")


def _resources(values: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items() if k != "guests")


@main.command("heal-list")
@click.option("--host")
@click.option("--limit", type=int, default=50, show_default=True)
@json_option
@handle_errors
def heal_list(host: str | None, limit: int, as_json: bool) -> None:
    """What the resource tracker corrected in the accounting, newest first."""
    render(
        api().list_heals(host=host, limit=limit),
        ("created_at", "host", "node", "action", "consumer_uuid", "resources", "reason"),
        as_json,
    )


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
@handle_errors
def up(n_hosts: int) -> None:
    """Run a whole cluster in the foreground: broker (embedded unless NOVAQ_BROKER_URL),
    scheduler, one compute worker per host, beat and Flower. Ctrl-C stops it cleanly."""
    from novaq.cluster import Cluster
    from novaq.settings import load_settings

    cluster = Cluster(load_settings(), n_hosts=n_hosts)
    sys.exit(cluster.run_forever())


@main.command()
@click.option("--hosts", "n_hosts", type=click.IntRange(1, 64), default=2, show_default=True)
@click.option("--servers", "n_servers", type=click.IntRange(1, 100), default=6, show_default=True)
@click.option("--keep/--no-keep", default=False, help="Keep the cluster running afterwards.")
@handle_errors
def demo(n_hosts: int, n_servers: int, keep: bool) -> None:
    """Start a local cluster and boot servers across its hosts, with progress."""
    from novaq.demo import run_demo

    sys.exit(run_demo(n_hosts=n_hosts, n_servers=n_servers, keep=keep, console=console))


if __name__ == "__main__":
    main()
