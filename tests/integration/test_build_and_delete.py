"""Boot and delete on a real broker (Redis; RabbitMQ too where marked), PostgreSQL and
worker processes for two hosts."""

from __future__ import annotations

import concurrent.futures
import contextlib
import uuid as uuid_module

import pytest
from sqlalchemy import func, select

from models import Allocation
from models.db import session_scope
from novaq.exceptions import FlavorExists
from tests.integration.brokers import Deployment, on_both_brokers
from workflows import api

pytestmark = pytest.mark.integration


def _flavor(name: str, vcpus: int, memory_mb: int, root_gb: int) -> str:
    with contextlib.suppress(FlavorExists):
        api.create_flavor(name, vcpus, memory_mb, root_gb)
    return name


def _allocations(db_url: str) -> int:
    with session_scope(db_url) as session:
        return int(session.scalar(select(func.count()).select_from(Allocation)) or 0)


@on_both_brokers
def test_six_servers_spread_over_both_hosts_then_delete_returns_everything(
    deployment: Deployment,
) -> None:
    flavor = _flavor("it.small", 1, 2048, 10)
    uuids = api.boot("it", flavor, "cirros", count=6)
    views = [api.wait(u, "ACTIVE", timeout=60) for u in uuids]
    hosts = {v["host"] for v in views}
    assert hosts == {"host1", "host2"}
    for view in views:
        diag = api.diagnostics(view["uuid"])
        assert diag["uuid"] == view["uuid"] and diag["power_state"] == 1
        assert diag["vcpus"] == 1 and diag["memory_mb"] == 2048
        assert f"<uuid>{view['uuid']}</uuid>" in diag["xml"]
    by_host = {h["host"]: h for h in api.list_hosts()}
    assert sum(h["running_vms"] for h in by_host.values()) == 6
    assert _allocations(deployment.db_url) == 18  # VCPU, MEMORY_MB, DISK_GB per server

    for uuid in uuids:
        api.delete(uuid)
    for uuid in uuids:
        assert api.wait(uuid, "DELETED", timeout=60)["deleted_at"] is not None
    assert _allocations(deployment.db_url) == 0
    for host in api.list_hosts():
        assert (host["vcpus_used"], host["memory_mb_used"], host["local_gb_used"]) == (0, 512, 0)
    with pytest.raises(Exception, match="could not be found"):
        api.diagnostics(uuids[0])


def test_twenty_boots_at_once_against_room_for_ten(services: str, two_hosts: object) -> None:
    # Each host: 32768 MB - 512 reserved = 32256 MB, room for five 6000 MB servers.
    flavor = _flavor("it.fat", 1, 6000, 10)
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        futures = [pool.submit(api.boot, f"race-{i}", flavor, "cirros") for i in range(20)]
        uuids = [u for f in futures for u in f.result()]
    finals = {}
    for uuid in uuids:
        view = _wait_final(uuid)
        finals[uuid] = view
    active = [v for v in finals.values() if v["status"] == "ACTIVE"]
    errors = [v for v in finals.values() if v["status"] == "ERROR"]
    assert len(active) == 10 and len(errors) == 10
    assert all(v["fault"]["message"].startswith("No valid host was found") for v in errors)
    for host in api.list_hosts():
        assert host["memory_mb_used"] <= host["memory_mb"]
        assert host["memory_mb_used"] == 512 + 6000 * sum(v["host"] == host["host"] for v in active)
    for uuid in uuids:
        api.delete(uuid)
    for uuid in uuids:
        api.wait(uuid, "DELETED", timeout=60)
    assert _allocations(services) == 0


def _wait_final(uuid: str) -> dict[str, object]:
    import time

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        view = api.show(uuid)
        if view["status"] in {"ACTIVE", "ERROR"} and view["task_state"] is None:
            return view
        time.sleep(0.2)
    raise AssertionError(f"{uuid} never settled: {api.show(uuid)}")


def test_unknown_instance_is_refused_before_anything_is_sent(services: str) -> None:
    with pytest.raises(Exception, match="could not be found"):
        api.delete(str(uuid_module.uuid4()))
