"""Rebuild and evacuate end to end on real worker processes (libvirt test:/// hosts whose
guests outlive their workers): a rebuild gives the server its new image and keeps its
GPU; an evacuation brings a server of a dead, forced-down host up on another host
through the scheduler, and the dead host's start-up recovery destroys the guest it still
had and frees its allocation, leaving the audit clean."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from novaq.cli import main
from tests.factories import write_raw_image
from tests.integration.checks import assert_no_leaks, boot_active, flavor, hostdevs, memory_used
from tests.integration.workers import Cluster, Worker
from workflows import api

pytestmark = pytest.mark.integration

SOURCE, DEST, SLOW = "evac-a", "evac-b", "evac-slow"


def _image(state_dir: Path, name: str) -> str:
    with contextlib.suppress(Exception):
        return str(api.show_image(name)["id"])
    data = write_raw_image(state_dir / f"{name}.raw", 2 * 1024 * 1024)
    return str(api.create_image(name, str(data), disk_format="raw")["id"])


def _add_host(cluster: Cluster, host: str) -> None:
    cluster.add(host, f"compute.{host}", f"compute@{host}", host)
    cluster.wait_ready({f"compute@{host}"})


@pytest.fixture
def evacuation_hosts(two_hosts: Cluster) -> Iterator[Cluster]:
    """Two more compute hosts for the evacuation, stopped and forced down afterwards so
    that no later test schedules onto them."""
    for host in (SOURCE, DEST):
        _add_host(two_hosts, host)
    yield two_hosts
    for host in (SOURCE, DEST):
        worker = two_hosts.workers.pop(host, None)  # a failed test may have stopped it
        if worker is not None:
            worker.stop()
        with contextlib.suppress(Exception):
            api.force_down_service(host)


def _guests(report: dict[str, Any], host: str) -> int | None:
    [node] = [n for n in report["nodes"] if n["host"] == host]
    hypervisor = node["usage"]["hypervisor"]
    return None if hypervisor is None else int(hypervisor["guests"])


def test_rebuild_gives_the_server_the_new_image_and_keeps_its_gpu(
    two_hosts: Cluster, cleanup: list[str], state_dir: Path
) -> None:
    new_image = _image(state_dir, "rebuild-it")
    server = boot_active("rb-gpu", flavor("rb.gpu1", 2, 2048, gpus=1), cleanup)
    [device] = hostdevs(server["uuid"])
    idle = memory_used()

    api.rebuild(server["uuid"], "rebuild-it")
    view = api.wait(server["uuid"], "ACTIVE", timeout=60)

    assert (view["image"], view["host"]) == (new_image, server["host"])
    assert hostdevs(server["uuid"]) == [device]  # exactly its device, no duplicate
    assert memory_used() == idle  # no new claim: same host, same flavor
    [action] = [a for a in api.list_actions(server["uuid"]) if a["action"] == "rebuild"]
    assert [(e["event"], e["result"]) for e in action["events"]] == [
        ("compute_rebuild_instance", "Success")
    ]
    assert_no_leaks()


def test_evacuate_from_a_dead_host_then_its_restart_cleans_up(
    evacuation_hosts: Cluster, cleanup: list[str]
) -> None:
    idle = memory_used()
    # Placed on the source by force (Nova's zone:host), so the test knows both ends.
    [uuid] = api.boot(
        "evac", flavor("ev.small", 1, 1024), "cirros", availability_zone=f"nova:{SOURCE}"
    )
    cleanup.append(uuid)
    assert api.wait(uuid, "ACTIVE", timeout=60)["host"] == SOURCE

    with pytest.raises(Exception, match="still in use"):
        api.evacuate(uuid, host=DEST)  # the source is up: refused, nothing written
    assert api.list_migrations(instance_uuid=uuid) == []

    evacuation_hosts.workers[SOURCE].stop()  # the host dies, its guest with it "running"
    api.force_down_service(SOURCE)  # the operator fences it
    result = CliRunner().invoke(main, ["evacuate", "evac", "--host", DEST, "--wait", "60"])
    assert result.exit_code == 0, result.output
    assert f"Server {uuid} is ACTIVE on {DEST}" in result.output
    view = api.show(uuid)

    assert view["host"] == DEST
    [migration] = api.list_migrations(instance_uuid=uuid)
    assert (migration["migration_type"], migration["status"]) == ("evacuation", "done")
    assert (migration["source_compute"], migration["dest_compute"]) == (SOURCE, DEST)
    used = memory_used()
    # The dead host keeps the evacuation's allocation until it cleans up.
    assert used[SOURCE] == idle[SOURCE] + 1024 and used[DEST] == idle[DEST] + 1024
    assert api.diagnostics(uuid)["power_state"] == 1
    assert_no_leaks((SOURCE, DEST))

    _add_host(evacuation_hosts, SOURCE)  # it comes back: init_host cleans up
    api.force_down_service(SOURCE, forced_down=False)

    assert api.list_migrations(instance_uuid=uuid)[0]["status"] == "completed"
    assert memory_used()[SOURCE] == idle[SOURCE]
    report = api.audit()
    assert _guests(report, SOURCE) == 0  # the old guest was destroyed
    assert _guests(report, DEST) == 1
    assert_no_leaks((SOURCE, DEST))
    events = [e["event"] for a in api.list_actions(uuid) for e in a["events"]]
    assert events[-1] == "compute_rebuild_instance"


@pytest.fixture
def slow_destination(evacuation_hosts: Cluster, tmp_path: Path) -> Iterator[Worker]:
    """A destination whose guests take 5 s to start: a window to kill its worker."""
    config = tmp_path / "slow.toml"
    config.write_text(f'[[hosts]]\nname = "{SLOW}"\nspawn_delay_s = 5\n')
    worker = evacuation_hosts.add(
        SLOW, f"compute.{SLOW}", f"compute@{SLOW}", SLOW, extra_env={"NOVAQ_CONFIG": str(config)}
    )
    evacuation_hosts.wait_ready({f"compute@{SLOW}"})
    yield worker
    evacuation_hosts.workers.pop(SLOW, worker).stop()
    with contextlib.suppress(Exception):
        api.force_down_service(SLOW)


def test_an_evacuation_whose_destination_dies_mid_spawn_resumes_there(
    evacuation_hosts: Cluster, slow_destination: Worker, cleanup: list[str]
) -> None:
    [uuid] = api.boot(
        "evac-kill", flavor("ev.small", 1, 1024), "cirros", availability_zone=f"nova:{SOURCE}"
    )
    cleanup.append(uuid)
    api.wait(uuid, "ACTIVE", timeout=60)
    evacuation_hosts.workers.pop(SOURCE).stop()  # out of the cluster's readiness checks
    api.force_down_service(SOURCE)

    api.evacuate(uuid, host=SLOW)
    deadline = time.monotonic() + 30
    while api.show(uuid)["task_state"] != "rebuild_spawning":
        assert time.monotonic() < deadline, api.show(uuid)
        time.sleep(0.1)
    slow_destination.stop(signal.SIGKILL)  # mid spawn, its guest half started
    slow_destination.start()
    evacuation_hosts.wait_ready({f"compute@{SLOW}"})

    view = api.wait(uuid, "ACTIVE", timeout=90)  # the step comes back and resumes
    assert view["host"] == SLOW
    assert api.list_migrations(instance_uuid=uuid)[0]["status"] == "done"
    assert_no_leaks((SOURCE, SLOW))
    _add_host(evacuation_hosts, SOURCE)
    api.force_down_service(SOURCE, forced_down=False)
    assert api.list_migrations(instance_uuid=uuid)[0]["status"] == "completed"
    assert _guests(api.audit(), SOURCE) == 0
    assert_no_leaks((SOURCE, SLOW))
