"""``novaq demo``: a local cluster running a real scenario, with progress on the console.

Starts the cluster (embedded broker, SQLite, simulated libvirt hosts, scheduler, compute
workers, beat, Flower; a local "cirros" image registered if none exists), creates flavors,
boots servers across the hosts, shows where each landed and what each host accounts, then
deletes them and shows the hosts back at their reserved amounts.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy.exc import SQLAlchemyError

from novaq.exceptions import FlavorExists, ServiceUnavailable
from novaq.launcher.cluster import Cluster
from novaq.launcher.flower_guard import credentials_path
from novaq.launcher.plan import cluster_config_path
from novaq.settings import get_settings, load_settings

DEMO_FLAVORS = (
    ("m1.small", 1, 2048, 20),
    ("m1.medium", 2, 4096, 40),
)
DEMO_IMAGE = "cirros"
FINAL = {"ACTIVE", "ERROR"}


def point_api_at(cluster: Cluster) -> None:
    """Make this process's API talk to the cluster it just started."""
    os.environ["NOVAQ_BROKER_URL"] = cluster.broker_url
    os.environ["NOVAQ_DATABASE_URL"] = cluster.settings.sqlalchemy_url
    os.environ["NOVAQ_STATE_DIR"] = str(cluster.state_dir)
    os.environ["NOVAQ_CONFIG"] = str(cluster_config_path(cluster.settings))
    get_settings.cache_clear()


def run_demo(n_hosts: int, n_servers: int, keep: bool, console: Console) -> int:
    cluster = Cluster(load_settings(), n_hosts=n_hosts, quiet=True)
    runs_before = _run_counts(cluster.settings.sqlalchemy_url)
    with console.status("Starting the cluster: broker, scheduler, compute workers, beat, Flower"):
        cluster.start()
        cluster.wait_ready()
    console.print(
        f"[green]Cluster up[/]: hosts {', '.join(cluster.hosts)}; logs in {cluster.log_dir}"
    )
    try:
        point_api_at(cluster)
        from workflows import api

        _create_flavors(api, console)
        _show_image(api, console)
        uuids = _boot_with_progress(api, n_servers, console)
        console.print(_servers_table(api, uuids))
        console.print(_hosts_table(api, "Hosts after boot"))
        console.print(_periodic_table(api, runs_before))
        console.print(f"Flower: [link={cluster.flower_url}]{cluster.flower_url}[/link]")
        if (credentials := credentials_path(cluster.settings)) is not None:
            console.print(f"Flower login (user:password): in {credentials}")
        if keep:
            console.print("Cluster kept running; Ctrl-C stops it.")
            return cluster.run_forever()
        _delete_with_progress(api, uuids, console)
        console.print(_hosts_table(api, "Hosts after delete (back to reserved)"))
        return 0 if all(api.show(u)["status"] == "DELETED" for u in uuids) else 1
    finally:
        if not keep:
            with console.status("Stopping the cluster"):
                cluster.stop()


def _create_flavors(api: Any, console: Console) -> None:
    for name, vcpus, memory_mb, root_gb in DEMO_FLAVORS:
        try:
            api.create_flavor(name, vcpus, memory_mb, root_gb)
            console.print(f"flavor {name}: {vcpus} vCPU, {memory_mb} MB, {root_gb} GB")
        except FlavorExists:
            console.print(f"flavor {name}: exists")


def _show_image(api: Any, console: Console) -> None:
    """The image the servers boot: registered by the cluster's start when missing (1 MiB of
    raw zeros made locally, nothing downloaded)."""
    image = api.show_image(DEMO_IMAGE)
    console.print(
        f"image {image['name']}: {image['id']}, {image['disk_format']}, "
        f"{image['virtual_size']} bytes, sha256 {image['os_hash_value'][:12]}…"
    )


def _progress(console: Console) -> Progress:
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    )


def _boot_with_progress(api: Any, n_servers: int, console: Console) -> list[str]:
    uuids = []
    for index in range(n_servers):
        flavor = DEMO_FLAVORS[index % len(DEMO_FLAVORS)][0]
        uuids.extend(api.boot(f"demo-{index + 1}", flavor, DEMO_IMAGE))
    _watch(api, uuids, FINAL, "Booting servers", console)
    return uuids


def _delete_with_progress(api: Any, uuids: list[str], console: Console) -> None:
    for uuid in uuids:
        api.delete(uuid)
    _watch(api, uuids, {"DELETED"}, "Deleting servers", console)


def _watch(
    api: Any,
    uuids: list[str],
    done: set[str],
    what: str,
    console: Console,
    timeout_s: float = 120.0,
) -> None:
    deadline = time.monotonic() + timeout_s
    with _progress(console) as progress:
        task = progress.add_task(what, total=len(uuids))
        while time.monotonic() < deadline:
            statuses = [api.show(u)["status"] for u in uuids]
            finished = sum(s in done for s in statuses)
            summary = ", ".join(f"{s}={statuses.count(s)}" for s in sorted(set(statuses)))
            progress.update(task, completed=finished, description=f"{what} ({summary})")
            if finished == len(uuids):
                return
            time.sleep(0.25)


def _servers_table(api: Any, uuids: list[str]) -> Table:
    table = Table("name", "uuid", "status", "host", "flavor", "power", "fault", title="Servers")
    for uuid in uuids:
        s = api.show(uuid)
        fault = s["fault"]["message"] if s["fault"] else ""
        table.add_row(
            s["name"],
            s["uuid"],
            s["status"],
            s["host"] or "-",
            s["flavor"]["name"],
            s["power_state_name"],
            fault,
        )
    return table


def _hosts_table(api: Any, title: str) -> Table:
    table = Table(
        "host", "state", "vCPUs used", "RAM used (MB)", "disk used (GB)", "servers", title=title
    )
    for h in api.list_hosts():
        table.add_row(
            h["host"],
            h["state"],
            f"{h['vcpus_used']}/{h['vcpus']}",
            f"{h['memory_mb_used']}/{h['memory_mb']}",
            f"{h['local_gb_used']}/{h['local_gb']}",
            str(h["running_vms"]),
        )
    return table


def _run_counts(db_url: str) -> dict[tuple[str, str], int]:
    """Periodic runs recorded so far: an earlier demo on this state directory left them.
    None on a new state directory, before the database's first upgrade."""
    from compute.periodic import runs
    from compute.sessions import sessions_for

    try:
        return {key: r["run_count"] for key, r in runs.last_runs(sessions_for(db_url)).items()}
    except (SQLAlchemyError, ServiceUnavailable):  # no database yet, or no table yet
        return {}


def _periodic_table(api: Any, before: dict[tuple[str, str], int]) -> Table:
    """What beat and the workers' starts have run during this demo, per host (``novaq
    periodic-list`` shows the totals)."""
    table = Table("periodic task", "spacing", "runs per host", title="Periodic maintenance")
    for task in api.list_periodic_tasks():
        if not task["enabled"]:
            continue
        counts = [
            (r, r["run_count"] - before.get((task["name"], r["host"]), 0)) for r in task["runs"]
        ]
        done = ", ".join(f"{r['host']}: {n} ({r['last_status']})" for r, n in counts if n > 0)
        table.add_row(task["name"], f"{task['spacing']} s", done or "not yet")
    return table
