"""Resize and cold migrate across two real hosts, checked through show, diagnostics and
the audit, GPUs included: Nova's bug where a 1 → 2 GPU resize left one GPU must not exist.
A resize across hosts and its revert run on RabbitMQ too."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import update

from models import Service
from models.db import session_scope
from tests.integration.brokers import Deployment, on_both_brokers
from tests.integration.checks import (
    assert_no_leaks,
    boot_active,
    flavor,
    hostdevs,
    memory_used,
)
from tests.integration.workers import Cluster
from workflows import api

pytestmark = pytest.mark.integration


def api_server() -> str:
    """The image endpoint the tier's workers fetch from (``tests/integration/conftest.py``)."""
    return os.environ["NOVAQ_GLANCE__API_SERVERS"]


@on_both_brokers
def test_resize_across_hosts_then_confirm(deployment: Deployment, cleanup: list[str]) -> None:
    idle = memory_used()
    server = boot_active("r1", flavor("rs.16g", 2, 16000), cleanup)
    source = server["host"]
    api.resize(server["uuid"], flavor("rs.17g", 4, 17000))  # both cannot fit on one host
    view = api.wait(server["uuid"], "VERIFY_RESIZE", timeout=60)
    assert view["host"] != source and view["flavor"]["name"] == "rs.17g"
    assert api.diagnostics(server["uuid"])["vcpus"] == 4
    # Over the network, as across machines: the destination pulled the disks from the
    # source's disk endpoint, and both read the image from the image endpoint.
    workers = deployment.cluster.workers
    logs = {host: workers[host].log.read_text() for host in (source, view["host"])}
    assert f"Pulled the disks of {server['uuid']} from http://" in logs[view["host"]]
    assert all(f"fetched from {api_server()}/images/" in log for log in logs.values())
    [migration] = api.list_migrations(instance_uuid=server["uuid"])
    assert (migration["status"], migration["source_compute"], migration["dest_compute"]) == (
        "finished",
        source,
        view["host"],
    )
    used = memory_used()
    assert used[source] == idle[source] + 16000  # the migration holds the source
    assert used[view["host"]] == idle[view["host"]] + 17000
    assert_no_leaks()
    api.confirm_resize(server["uuid"])
    view = api.wait(server["uuid"], "ACTIVE", timeout=60)
    assert api.list_migrations(instance_uuid=server["uuid"])[0]["status"] == "confirmed"
    assert memory_used()[source] == idle[source]
    events = [e["event"] for a in api.list_actions(server["uuid"]) for e in a["events"]]
    assert events[-4:] == [
        "compute_prep_resize",
        "compute_resize_instance",
        "compute_finish_resize",
        "compute_confirm_resize",
    ]
    assert_no_leaks()


@on_both_brokers
def test_resize_then_revert_returns_to_the_source(
    deployment: Deployment, cleanup: list[str]
) -> None:
    idle = memory_used()
    server = boot_active("r2", flavor("rs.16g", 2, 16000), cleanup)
    api.resize(server["uuid"], flavor("rs.17g", 4, 17000))
    dest = api.wait(server["uuid"], "VERIFY_RESIZE", timeout=60)["host"]
    api.revert_resize(server["uuid"])
    view = api.wait(server["uuid"], "ACTIVE", timeout=60)
    assert view["host"] == server["host"] and view["flavor"]["name"] == "rs.16g"
    assert api.diagnostics(server["uuid"])["vcpus"] == 2
    assert memory_used()[dest] == idle[dest]
    assert api.list_migrations(instance_uuid=server["uuid"])[0]["status"] == "reverted"
    assert_no_leaks()


def test_same_host_resize_when_the_other_host_is_disabled(
    services: str, two_hosts: Cluster, cleanup: list[str]
) -> None:
    server = boot_active("r3", flavor("rs.small", 1, 1024), cleanup)
    other = "host2" if server["host"] == "host1" else "host1"
    with session_scope(services) as session:
        session.execute(update(Service).where(Service.host == other).values(disabled=True))

    try:
        host = server["host"]
        before = memory_used()[host]
        api.resize(server["uuid"], flavor("rs.medium", 2, 2048))
        view = api.wait(server["uuid"], "VERIFY_RESIZE", timeout=60)
        assert view["host"] == server["host"]
        # old and new flavor both held during the resize
        assert memory_used()[host] == before + 2048
        assert_no_leaks()
        api.confirm_resize(server["uuid"])
        api.wait(server["uuid"], "ACTIVE", timeout=60)
        assert api.diagnostics(server["uuid"])["memory_mb"] == 2048
        assert memory_used()[host] == before - 1024 + 2048
    finally:
        with session_scope(services) as session:
            session.execute(update(Service).where(Service.host == other).values(disabled=False))
    assert_no_leaks()


def test_cold_migrate_never_picks_the_current_host(two_hosts: Cluster, cleanup: list[str]) -> None:
    server = boot_active("m1", flavor("rs.small", 1, 1024), cleanup)
    api.migrate(server["uuid"])
    view = api.wait(server["uuid"], "VERIFY_RESIZE", timeout=60)
    assert view["host"] != server["host"] and view["flavor"]["name"] == "rs.small"
    assert api.list_migrations(instance_uuid=server["uuid"])[0]["migration_type"] == "migration"
    api.confirm_resize(server["uuid"])
    api.wait(server["uuid"], "ACTIVE", timeout=60)
    assert_no_leaks()


@pytest.mark.parametrize("finish", ["confirm", "revert"])
def test_gpu_resize_one_to_two_gives_the_guest_twohostdevs(
    two_hosts: Cluster, cleanup: list[str], finish: str
) -> None:
    server = boot_active("gpu", flavor("rs.gpu1", 8, 8192, gpus=1), cleanup)
    source = server["host"]
    [old_device] = hostdevs(server["uuid"])
    api.resize(server["uuid"], flavor("rs.gpu2", 16, 16384, gpus=2))
    view = api.wait(server["uuid"], "VERIFY_RESIZE", timeout=60)
    dest = view["host"]
    dest_gpus = {
        "host1": ["0000:08:00.0", "0000:88:00.0"],
        "host2": ["0000:09:00.0", "0000:89:00.0"],
    }[dest]
    assert dest != source
    assert hostdevs(server["uuid"]) == dest_gpus  # two <hostdev>, the destination's devices
    assert (
        sorted(
            d["address"]
            for d in view["pci_devices"]
            if d["status"] == "allocated" and d["compute_node_id"] != _node_id(source)
        )
        == dest_gpus
    )
    assert_no_leaks()
    if finish == "confirm":
        api.confirm_resize(server["uuid"])
        view = api.wait(server["uuid"], "ACTIVE", timeout=60)
        assert hostdevs(server["uuid"]) == dest_gpus
        assert [d["address"] for d in view["pci_devices"]] == dest_gpus  # old one freed
    else:
        api.revert_resize(server["uuid"])
        view = api.wait(server["uuid"], "ACTIVE", timeout=60)
        assert view["host"] == source
        assert hostdevs(server["uuid"]) == [old_device]
        assert [d["address"] for d in view["pci_devices"]] == [old_device]
    assert_no_leaks()


def test_gpu_resize_two_to_one(two_hosts: Cluster, cleanup: list[str]) -> None:
    server = boot_active("gpu2", flavor("rs.gpu2", 16, 16384, gpus=2), cleanup)
    api.resize(server["uuid"], flavor("rs.gpu1", 8, 8192, gpus=1))
    view = api.wait(server["uuid"], "VERIFY_RESIZE", timeout=60)
    assert len(hostdevs(server["uuid"])) == 1
    api.confirm_resize(server["uuid"])
    view = api.wait(server["uuid"], "ACTIVE", timeout=60)
    assert len(view["pci_devices"]) == 1
    assert_no_leaks()


def _node_id(host: str) -> int:
    from models import ComputeNode
    from workflows.api.common import db_url

    with session_scope(db_url()) as session:
        return session.query(ComputeNode.id).filter_by(host=host, deleted=0).scalar()


def test_resize_to_a_flavor_no_host_can_take_leaves_the_server_active(
    two_hosts: Cluster, cleanup: list[str]
) -> None:
    server = boot_active("r4", flavor("rs.small", 1, 1024), cleanup)
    api.resize(server["uuid"], flavor("rs.huge", 2, 10**6))
    deadline_view = None
    for _ in range(100):
        deadline_view = api.show(server["uuid"])
        if deadline_view["task_state"] is None:
            break
        import time

        time.sleep(0.2)
    assert deadline_view is not None
    assert deadline_view["status"] == "ACTIVE" and deadline_view["host"] == server["host"]
    assert deadline_view["fault"]["message"].startswith("No valid host was found")
    assert deadline_view["flavor"]["name"] == "rs.small"
    resize_action = api.list_actions(server["uuid"])[-1]
    assert resize_action["action"] == "resize"
    assert [(e["event"], e["result"]) for e in resize_action["events"]] == [
        ("conductor_migrate_server", "Error")
    ]
    assert api.list_migrations(instance_uuid=server["uuid"])[0]["status"] == "error"
    assert_no_leaks()
