"""``novaq`` commands for operators: services, hypervisors, aggregates, server groups,
the audit and its heals."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from novaq.cli.base import api, console, err_console, handle_errors, json_option, main, render
from novaq.exceptions import NovaqError

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


SERVICE_COLUMNS = ("id", "binary", "host", "status", "state", "forced_down", "disabled_reason")


@main.command("service-disable")
@click.argument("host")
@click.option("--reason", help="Why (shown in service-list); at most 255 characters.")
@click.option("--binary", default="novaq-compute", show_default=True)
@json_option
@handle_errors
def service_disable(host: str, reason: str | None, binary: str, as_json: bool) -> None:
    """Disable a service: no new servers are scheduled to it and beat sends it no
    periodic tasks; its servers keep running."""
    render(api().disable_service(host, reason=reason, binary=binary), SERVICE_COLUMNS, as_json)


@main.command("service-enable")
@click.argument("host")
@click.option("--binary", default="novaq-compute", show_default=True)
@json_option
@handle_errors
def service_enable(host: str, binary: str, as_json: bool) -> None:
    """Enable a service again (clears the disabled reason)."""
    render(api().enable_service(host, binary=binary), SERVICE_COLUMNS, as_json)


@main.command("service-force-down")
@click.argument("host")
@click.option("--unset", is_flag=True, help="Let the host's heartbeats count again.")
@json_option
@handle_errors
def service_force_down(host: str, unset: bool, as_json: bool) -> None:
    """Mark a compute host down now (e.g. fenced) without waiting for service_down_time."""
    render(api().force_down_service(host, forced_down=not unset), SERVICE_COLUMNS, as_json)


# -- periodic maintenance --------------------------------------------------------------------


@main.command("periodic-list")
@click.option("--long", "long_", is_flag=True, help="Also say what each task does.")
@json_option
@handle_errors
def periodic_list(long_: bool, as_json: bool) -> None:
    """Each periodic task beat runs: spacing, whether enabled, and its last run per host
    (from the database)."""
    tasks = api().list_periodic_tasks()
    beat = api().beat_status()
    if as_json:
        click.echo(json.dumps({"beat": beat, "tasks": tasks}, indent=2, default=str))
        return
    table = Table(
        "task",
        "spacing",
        "option",
        "enabled",
        "host",
        "last run (UTC)",
        "status",
        "runs",
        title="Periodic tasks",
    )
    for task in tasks:
        spacing = f"{task['spacing']} s" if task["enabled"] else "off"
        if task["run_immediately"] and task["enabled"]:
            spacing += " (now at start)"
        enabled = "yes" if task["enabled"] else "no"
        if task["enabled"] and task["idle_because"]:
            enabled = f"idle: {task['idle_because']}"
        hosts = task["runs"] or [None]
        for index, run in enumerate(hosts):
            first = index == 0
            table.add_row(
                escape(task["name"]) if first else "",
                spacing if first else "",
                escape(task["spacing_option"]) if first else "",
                escape(enabled) if first else "",
                escape(run["host"]) if run else "-",
                _when(run),
                escape(_status(run)),
                str(run["run_count"]) if run else "0",
            )
        if long_:
            table.add_row("", "", "", "", "", "", escape(task["doc"]), "")
    console.print(table)
    if beat:
        console.print(
            f"beat: running ({escape(beat['holder'])}, since {escape(str(beat['since']))})"
        )
    else:
        console.print("beat: [yellow]not running[/] (no one holds the beat lease)")


def _when(run: dict[str, Any] | None) -> str:
    if not run or not run["last_started_at"]:
        return "never"
    return str(run["last_started_at"]).replace("T", " ")[:19]


def _status(run: dict[str, Any] | None) -> str:
    if not run:
        return ""
    status = "running" if run["running"] else (run["last_status"] or "")
    if run["last_status"] == "error" and run["last_error"]:
        status += f": {run['last_error'][:60]}"
    elif run["last_status"] == "skipped":
        status += f" ({run['last_result'].get('skipped', '')})"
    return status


@main.command("periodic-run")
@click.argument("name")
@click.option("--host", help="Only this compute host (default: every up and enabled one).")
@handle_errors
def periodic_run(name: str, host: str | None) -> None:
    """Send one periodic task now (by its Nova name, e.g. _sync_power_states)."""
    ids = api().run_periodic_task(name, host=host)
    console.print(f"sent {escape(name)}: {len(ids)} message(s)")


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


def _aggregate_id(aggregate: str) -> int:
    """An aggregate's id from its id or name, as the nova client finds it."""
    return int(api().show_aggregate(aggregate)["id"])


@main.command("aggregate-add-host")
@click.argument("aggregate")
@click.argument("host")
@json_option
@handle_errors
def aggregate_add_host(aggregate: str, host: str, as_json: bool) -> None:
    """Add a compute host to an aggregate (by id or name)."""
    view = api().add_host_to_aggregate(_aggregate_id(aggregate), host)
    render(view, AGGREGATE_COLUMNS, as_json)


@main.command("aggregate-remove-host")
@click.argument("aggregate")
@click.argument("host")
@json_option
@handle_errors
def aggregate_remove_host(aggregate: str, host: str, as_json: bool) -> None:
    """Take a compute host out of an aggregate (by id or name)."""
    view = api().remove_host_from_aggregate(_aggregate_id(aggregate), host)
    render(view, AGGREGATE_COLUMNS, as_json)


@main.command("aggregate-set-metadata")
@click.argument("aggregate")
@click.argument("items", nargs=-1, required=True, metavar="KEY=VALUE|KEY")
@json_option
@handle_errors
def aggregate_set_metadata(aggregate: str, items: tuple[str, ...], as_json: bool) -> None:
    """Set aggregate metadata (a bare KEY removes it, as the nova client)."""
    metadata: dict[str, str | None] = {}
    for item in items:
        key, sep, value = item.partition("=")
        metadata[key] = value if sep else None
    view = api().set_aggregate_metadata(_aggregate_id(aggregate), metadata)
    render(view, AGGREGATE_COLUMNS, as_json)


@main.command("aggregate-show")
@click.argument("aggregate")
@json_option
@handle_errors
def aggregate_show(aggregate: str, as_json: bool) -> None:
    """Show an aggregate (by id or name)."""
    render(api().show_aggregate(aggregate), AGGREGATE_COLUMNS, as_json)


@main.command("aggregate-delete")
@click.argument("aggregate")
@handle_errors
def aggregate_delete(aggregate: str) -> None:
    """Delete an aggregate (by id or name); it must have no host."""
    deleted = api().delete_aggregate(aggregate)
    console.print(f"Deleted aggregate {escape(deleted['name'])} ({deleted['id']})")


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


GROUP_COLUMNS = ("id", "name", "policy", "rules", "members")


@main.command("server-group-show")
@click.argument("group")
@json_option
@handle_errors
def server_group_show(group: str, as_json: bool) -> None:
    """Show a server group (by uuid or name)."""
    render(api().show_server_group(group), GROUP_COLUMNS, as_json)


@main.command("server-group-delete")
@click.argument("groups", nargs=-1, required=True, metavar="GROUP...")
@handle_errors
def server_group_delete(groups: tuple[str, ...]) -> None:
    """Delete server groups (by uuid or name); their servers keep running. A group that
    cannot be deleted is reported and the others are still deleted (exit 1 at the end),
    as the nova client does."""
    failed = 0
    for group in groups:
        try:
            deleted = api().delete_server_group(group)
        except NovaqError as exc:
            failed += 1
            err_console.print(
                f"[bold red]ERROR ({type(exc).__name__}):[/] {escape(group)}: {escape(str(exc))}"
            )
            continue
        console.print(f"Deleted server group {escape(deleted['name'])} ({deleted['id']})")
    if failed:
        sys.exit(1)


@main.command("server-group-list")
@json_option
@handle_errors
def server_group_list(as_json: bool) -> None:
    """List server groups."""
    render(api().list_server_groups(), ("id", "name", "policy", "rules", "members"), as_json)


@main.command("audit")
@click.option("--host", "hosts", multiple=True, help="Only this host's nodes (repeatable).")
@json_option
@handle_errors
def audit_command(hosts: tuple[str, ...], as_json: bool) -> None:
    """Check the accounting: exit 3 when a leak is found (as nova-manage placement audit)."""
    report = api().audit(hosts=list(hosts) or None)
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
            escape(f"{node['host']}/{node['node']}"),
            _resources(usage["allocations"]),
            _resources(usage["instances_and_migrations"]),
            _resources(usage["hypervisor"]) if usage["hypervisor"] else "unavailable",
            _resources({rc: int(v) for rc, v in node["capacity"].items()}),
            str(node["leaks"]),
        )
    console.print(table)
    for node in report["nodes"]:
        for note in node["overcommit"]:
            console.print(f"[yellow]overcommit[/] {escape(node['host'])}: {escape(note)}")
        for f in node["discrepancies"]:
            colour = "red" if f["severity"] == "leak" else "yellow"
            console.print(
                f"[{colour}]{escape(f['severity'])}[/] {escape(node['host'])} "
                f"{escape(f['kind'])} {escape(f['consumer'] or '')}: {escape(str(f['detail']))}"
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
