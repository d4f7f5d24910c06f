"""novaq across machines: three compute machines (``novaq compute``) and two controllers
(``novaq controller``), each a network namespace (``tests/multihost/conftest.py``)."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tasks.beat import TAKEOVER_BOUND_S
from tests.integration.workers import Worker
from tests.multihost import checks
from tests.multihost.checks import (
    audit_clean,
    boot,
    delete_all,
    guests,
    queue_length,
    service_up,
    stuck,
    wait_all,
)
from tests.multihost.cloud import CONTROLLER, Cloud, wait_until
from tests.multihost.conftest import BROKER, COMPUTE_HOSTS, IMAGE_STORE, beat_holder
from workflows import api

pytestmark = pytest.mark.multihost

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _instance_dirs(cloud: Cloud, host: str) -> set[str]:
    """The guests' directories on ``host``'s own disk (its instances path)."""
    root = cloud.home(host) / "instances" / host
    return {p.name for p in root.iterdir() if p.is_dir() and _UUID.fullmatch(p.name)}


def test_servers_boot_on_every_compute_machine_each_on_its_own_disk(cloud: Cloud) -> None:
    uuids = boot("spread", 6)
    views = wait_all(uuids, "ACTIVE")
    placed = {view["uuid"]: view["host"] for view in views}

    assert set(placed.values()) == set(COMPUTE_HOSTS)
    for host in COMPUTE_HOSTS:
        mine = {uuid for uuid, where in placed.items() if where == host}
        assert _instance_dirs(cloud, host) == mine
        # The image came over the network into the machine's own cache.
        assert any((cloud.home(host) / "instances" / host / "_base").iterdir())
    # Each machine downloaded it from the first controller's image endpoint, and serves
    # its own disks (for a move) on its own address.
    fetched = f"fetched from {cloud.image_server(CONTROLLER)}/images/"
    endpoints = disk_endpoints()
    for host in COMPUTE_HOSTS:
        assert fetched in cloud.processes[host].tail(1_000_000)
        assert endpoints[host].startswith(f"http://{cloud.network.machines[host].address}:")
    report = audit_clean(COMPUTE_HOSTS)
    assert guests(report) == {h: list(placed.values()).count(h) for h in COMPUTE_HOSTS}

    delete_all(uuids)

    assert all(_instance_dirs(cloud, host) == set() for host in COMPUTE_HOSTS)
    assert set(guests(audit_clean(COMPUTE_HOSTS)).values()) == {0}
    assert stuck() == []


def disk_endpoints() -> dict[str, str]:
    """Each compute service's published disk endpoint URL."""
    import os

    from sqlalchemy import select

    from models import Service
    from models.db import session_scope

    with session_scope(os.environ["NOVAQ_DATABASE_URL"]) as session:
        rows = session.execute(
            select(Service.host, Service.disk_endpoint).where(Service.binary == "novaq-compute")
        ).all()
    return {host: url or "" for host, url in rows}


def test_boots_in_flight_and_beat_survive_a_controller_machine_that_dies(cloud: Cloud) -> None:
    """The first controller's machine loses power (every process SIGKILLed) while its
    scheduler holds boots it has not finished and its beat holds the lease: the other
    controller's scheduler serves them (on Redis the dead one's unacknowledged messages
    come back after the visibility timeout), every server becomes ACTIVE, and the other
    controller's beat takes the lease over within its bound and the compute machines'
    periodic tasks keep coming."""
    survivor = "ctl2"
    uuids: list[str] = []

    def first_holds_a_boot() -> set[str]:
        uuids.extend(boot(f"sched-{len(uuids)}", 1))  # one more each time it holds none
        return _unfinished(cloud.processes[CONTROLLER])

    held = wait_until(f"{CONTROLLER} to hold a boot", first_holds_a_boot, 60)
    assert beat_holder().startswith(f"{CONTROLLER}:")
    cloud.power_off(CONTROLLER)
    died_at = time.monotonic()
    uuids += boot("sched-after", 4)  # and more after, for the survivor alone

    wait_until(
        f"{survivor}'s beat taking the lease",
        lambda: beat_holder().startswith(f"{survivor}:"),
        TAKEOVER_BOUND_S + 60,
    )
    print(f"beat taken over {time.monotonic() - died_at:.1f} s after {CONTROLLER} died")
    assert "took over the beat lease" in cloud.processes[survivor].tail(1_000_000)
    runs = _periodic_runs(cloud, "mh1")
    wait_until(
        "mh1's periodic tasks from the new beat", lambda: _periodic_runs(cloud, "mh1") > runs, 60
    )
    views = wait_all(uuids, "ACTIVE")

    assert held and {view["host"] for view in views} <= set(COMPUTE_HOSTS)
    audit_clean(COMPUTE_HOSTS)
    delete_all(uuids)
    assert stuck() == []
    cloud.add_controller(CONTROLLER, IMAGE_STORE)  # back, for the tests after: it stands by
    cloud.wait_ready({f"scheduler@{CONTROLLER}"})
    wait_until(
        f"{CONTROLLER}'s beat standing by",
        lambda: "standing by" in cloud.processes[CONTROLLER].tail(1_000_000),
        120,
    )
    assert beat_holder().startswith(f"{survivor}:")


#: One of the per-host periodic tasks beat fans out (every few seconds here).
_PERIODIC_RUN = re.compile(r"Task compute\.update_available_resource\[[0-9a-f-]+\] received")


def _periodic_runs(cloud: Cloud, host: str) -> int:
    """Runs of ``update_available_resource`` compute machine ``host`` has received."""
    return len(_PERIODIC_RUN.findall(cloud.processes[host].tail(10_000_000)))


_TASK_LINE = re.compile(r"Task ([\w.]+)\[([0-9a-f-]+)\] (received|succeeded|failed|raised)")


def _unfinished(process: Worker) -> set[str]:
    """The tasks ``process`` has logged as received and not (yet) as ended."""
    received: set[str] = set()
    ended: set[str] = set()
    for _, task_id, what in _TASK_LINE.findall(process.tail(200_000)):
        (received if what == "received" else ended).add(task_id)
    return received - ended


def test_a_cut_off_compute_machine_goes_down_is_evacuated_and_cleans_up_when_back(
    cloud: Cloud,
) -> None:
    """mh3 is cut off the network (no clean stop: its worker keeps running, unheard):
    its service goes down after service_down_time, its queue stops growing (beat sends a
    host that is down nothing; what it sent before expires), its servers are evacuated
    to the others; once back on the network its heartbeats resume, its queue drains, and
    its restart's init_host destroys the evacuated guests: audit clean, nothing stuck."""
    victim, others = "mh3", [h for h in COMPUTE_HOSTS if h != "mh3"]
    uuids = boot("part", 2, availability_zone=f"nova:{victim}")
    assert {view["host"] for view in wait_all(uuids, "ACTIVE")} == {victim}
    queue = f"compute.{victim}"

    cloud.network.cut(victim)
    try:
        wait_until(f"{victim} down", lambda: not service_up(victim), 60)
        at_down = queue_length(queue)
        if BROKER == "redis":
            # Beat's fan-out reached the queue between the cut and the down. RabbitMQ
            # instead pushes those messages to the cut-off consumer's prefetch window,
            # where they count as unacknowledged, not as waiting, until the broker gives
            # up on the connection: there the queue may well read 0 here.
            assert at_down > 0
        runs = {host: _periodic_runs(cloud, host) for host in others}
        for uuid in uuids:
            api.evacuate(uuid)
        views = wait_all(uuids, "ACTIVE")
        assert all(view["host"] in others for view in views)
        # Beat went on fanning out to the hosts that are up; none of it went to the host
        # that is down.
        wait_until(
            "beat's fan-out reaching the hosts that are up",
            lambda: all(_periodic_runs(cloud, host) > runs[host] for host in others),
            60,
        )
        assert queue_length(queue) <= at_down
    finally:
        # Healed whatever failed: the tests after this one need all three machines.
        cloud.network.heal(victim)

    wait_until(f"{victim} heard again", lambda: service_up(victim), 180)
    wait_until(f"{queue} drained", lambda: queue_length(queue) == 0, 120)
    cloud.restart_compute(victim)
    cloud.wait_ready({f"compute@{victim}"})

    migrations = wait_until(
        "the evacuations completed by the source's recovery",
        lambda: _all_completed(uuids),
        60,
    )
    assert {(m["source_compute"], m["migration_type"]) for m in migrations} == {
        (victim, "evacuation")
    }
    report = audit_clean(COMPUTE_HOSTS)
    assert guests(report)[victim] == 0
    assert stuck() == []
    delete_all(uuids)
    assert set(guests(audit_clean(COMPUTE_HOSTS)).values()) == {0}


def _all_completed(uuids: list[str]) -> list[dict[str, Any]]:
    migrations = [m for uuid in uuids for m in api.list_migrations(instance_uuid=uuid)]
    done = len(migrations) == len(uuids) and all(m["status"] == "completed" for m in migrations)
    return migrations if done else []


def _entries(cloud: Cloud, host: str) -> set[str]:
    """Every name in ``host``'s instances directory (guests, ``<uuid>_resize``, ``_base``)."""
    return {p.name for p in (cloud.home(host) / "instances" / host).iterdir()}


def test_a_resize_and_a_cold_migration_move_the_disks_between_machines(cloud: Cloud) -> None:
    """Two servers on mh1: one resized to mh2 (mh3 disabled meanwhile, so the scheduler
    has that one choice) and confirmed, the other cold-migrated to mh3 (forced) and
    reverted. Each destination pulls the disks over the network from mh1's disk endpoint
    (mh1 keeps them aside as ``<uuid>_resize``): confirm removes them, revert brings the
    server back to them."""
    source = "mh1"
    resized, migrated = boot("move", 2, availability_zone=f"nova:{source}")
    assert {v["host"] for v in wait_all([resized, migrated], "ACTIVE")} == {source}
    checks.flavor_of("mh.medium", 2, 1024, 1)

    api.disable_service("mh3", reason="mh2 is the resize's one choice")
    try:
        api.resize(resized, "mh.medium")
        moved = {resized: api.wait(resized, "VERIFY_RESIZE", timeout=180)["host"]}
    finally:
        api.enable_service("mh3")
    api.migrate(migrated, host="mh3")
    moved[migrated] = api.wait(migrated, "VERIFY_RESIZE", timeout=180)["host"]

    assert moved == {resized: "mh2", migrated: "mh3"}
    pulled_from = f"http://{cloud.network.machines[source].address}:"
    for uuid, dest in moved.items():
        assert f"Pulled the disks of {uuid} from {pulled_from}" in cloud.processes[dest].tail(
            10_000_000
        )
        assert uuid in _instance_dirs(cloud, dest)  # the guest's disks on its own disk
        assert (cloud.home(dest) / "instances" / dest / uuid / "disk").is_file()
        assert f"{uuid}_resize" in _entries(cloud, source)  # kept aside until the end
    audit_clean(COMPUTE_HOSTS)

    api.confirm_resize(resized)
    api.revert_resize(migrated)
    after = {uuid: api.wait(uuid, "ACTIVE", timeout=180)["host"] for uuid in moved}

    assert after == {resized: "mh2", migrated: source}
    assert resized not in _instance_dirs(cloud, source)
    assert f"{resized}_resize" not in _entries(cloud, source)  # confirm removed them
    assert migrated in _instance_dirs(cloud, source)  # revert restored them
    assert f"{migrated}_resize" not in _entries(cloud, source)
    assert migrated not in _instance_dirs(cloud, "mh3")
    statuses = {
        uuid: [m["status"] for m in api.list_migrations(instance_uuid=uuid)] for uuid in moved
    }
    assert statuses == {resized: ["confirmed"], migrated: ["reverted"]}
    audit_clean(COMPUTE_HOSTS)
    delete_all(moved)
    assert stuck() == []


_SELECTIONS = re.compile(r"Task scheduler\.select_destinations\[[0-9a-f-]+\] received")


def _selections(cloud: Cloud, controller: str) -> int:
    """Boots (select_destinations) ``controller``'s scheduler has received so far."""
    return len(_SELECTIONS.findall(cloud.processes[controller].tail(10_000_000)))


def test_two_schedulers_on_two_machines_never_overcommit_a_host(cloud: Cloud) -> None:
    """More boots than the cloud has room for, each its own request, sent at once: both
    controllers' schedulers claim on the same hosts, and no host ends up with more disk
    claimed than it has (the claims' compare-and-swap holds across machines). The servers
    that fit become ACTIVE; the others go to ERROR with NoValidHost, as in Nova."""
    hosts = {h["host"]: h for h in api.list_hosts() if h["host"] in COMPUTE_HOSTS}
    root_gb = min(h["local_gb"] for h in hosts.values()) // 2  # two fit on the smallest
    room = {
        name: int(h["local_gb"] * h["disk_allocation_ratio"]) // root_gb
        for name, h in hosts.items()
    }
    fill = checks.flavor_of("mh.fill", 1, 512, root_gb)
    before = {name: _selections(cloud, name) for name in cloud.controllers}
    surplus = 2
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [
            pool.submit(api.boot, f"fill-{i}", fill, "cirros")
            for i in range(sum(room.values()) + surplus)
        ]
        uuids = [uuid for future in futures for uuid in future.result()]

    settled = wait_until(
        "every boot ACTIVE or ERROR",
        lambda: _settled([api.show(uuid) for uuid in uuids]),
        240,
    )
    split = {name: _selections(cloud, name) - before[name] for name in cloud.controllers}
    print(f"boots selected per controller: {split}")

    active = [view for view in settled if view["status"] == "ACTIVE"]
    failed = [view for view in settled if view["status"] == "ERROR"]
    assert len(active) == sum(room.values()) and len(failed) == surplus
    assert all("No valid host" in (view["fault"] or {}).get("message", "") for view in failed)
    placed = {name: [v["host"] for v in active].count(name) for name in COMPUTE_HOSTS}
    assert placed == room
    for host in api.list_hosts():
        if host["host"] in COMPUTE_HOSTS:
            assert host["local_gb_used"] <= host["local_gb"] * host["disk_allocation_ratio"]
    audit_clean(COMPUTE_HOSTS)
    delete_all(uuids)
    assert stuck() == []


def _settled(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = all(v["status"] in ("ACTIVE", "ERROR") and v["task_state"] is None for v in views)
    return views if done else []
