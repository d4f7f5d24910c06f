"""novaq across machines: three compute machines, two scheduler machines and a
controller, each a network namespace (``tests/multihost/conftest.py``)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.integration.workers import Worker
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
from tests.multihost.cloud import Cloud, wait_until
from tests.multihost.conftest import COMPUTE_HOSTS
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
    # Each machine downloaded it from the controller's endpoint (the fixture's own
    # registration does not count: it reads the file it was given).
    assert cloud.image_endpoint is not None and cloud.image_endpoint.downloads >= len(COMPUTE_HOSTS)
    report = audit_clean(COMPUTE_HOSTS)
    assert guests(report) == {h: list(placed.values()).count(h) for h in COMPUTE_HOSTS}

    delete_all(uuids)

    assert all(_instance_dirs(cloud, host) == set() for host in COMPUTE_HOSTS)
    assert set(guests(audit_clean(COMPUTE_HOSTS)).values()) == {0}
    assert stuck() == []


def test_boots_in_flight_survive_a_scheduler_machine_that_dies(cloud: Cloud) -> None:
    """One scheduler machine loses power while it holds boots it has not finished: the
    other scheduler serves them (on Redis the dead one's unacknowledged messages come
    back after the visibility timeout), and every server becomes ACTIVE."""
    uuids: list[str] = []

    def sch1_holds_a_boot() -> set[str]:
        uuids.extend(boot(f"sched-{len(uuids)}", 1))  # one more each time it holds none
        return _unfinished(cloud.processes["sch1"])

    held = wait_until("sch1 to hold a boot", sch1_holds_a_boot, 60)
    cloud.power_off("sch1")
    uuids += boot("sched-after", 4)  # and more after, for the survivor alone

    views = wait_all(uuids, "ACTIVE")

    assert held and {view["host"] for view in views} <= set(COMPUTE_HOSTS)
    audit_clean(COMPUTE_HOSTS)
    delete_all(uuids)
    assert stuck() == []
    cloud.add_scheduler("sch1")  # back, for the tests after
    cloud.wait_ready({"scheduler@sch1"})


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
    wait_until(f"{victim} down", lambda: not service_up(victim), 60)
    at_down = queue_length(queue)
    assert at_down > 0  # beat's fan-out reached it between the cut and the down
    for uuid in uuids:
        api.evacuate(uuid)
    views = wait_all(uuids, "ACTIVE")
    assert all(view["host"] in others for view in views)
    # Beat has run many times since (per-host tasks every few seconds here): none of it
    # went to the host that is down.
    assert queue_length(queue) <= at_down

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
