"""Shelve (offloaded at once, Nova's default) and unshelve across two real hosts, GPUs
included, checked through show, diagnostics and the audit at every stage."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.checks import assert_no_leaks, flavor, hostdevs
from tests.integration.workers import Cluster
from workflows import api

pytestmark = pytest.mark.integration
HOST_GPUS = {
    "host1": {"0000:08:00.0", "0000:88:00.0"},
    "host2": {"0000:09:00.0", "0000:89:00.0"},
}


def _used() -> dict[str, int]:
    return {h["host"]: h["memory_mb_used"] for h in api.list_hosts()}


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    uuids: list[str] = []
    yield uuids
    for uuid in uuids:
        with contextlib.suppress(Exception):
            api.delete(uuid)
            api.wait(uuid, "DELETED", timeout=30)


def _boot(name: str, flavor: str, cleanup: list[str]) -> dict[str, Any]:
    [uuid] = api.boot(name, flavor, "cirros")
    cleanup.append(uuid)
    return api.wait(uuid, "ACTIVE", timeout=60)


def test_shelve_offloads_then_unshelve_lands_on_a_host_and_runs(
    two_hosts: Cluster, cleanup: list[str]
) -> None:
    idle = _used()
    server = _boot("sh1", flavor("sh.small", 2, 2048), cleanup)
    uuid, first = server["uuid"], server["host"]
    assert _used()[first] == idle[first] + 2048
    assert_no_leaks()

    api.shelve(uuid)
    view = api.wait(uuid, "SHELVED_OFFLOADED", timeout=60)
    assert (view["host"], view["node"], view["task_state"]) == (None, None, None)
    assert _used() == idle  # nothing held anywhere while offloaded
    assert_no_leaks()  # and no guest left behind on the old host

    api.unshelve(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=60)
    assert view["host"] in ("host1", "host2")
    info = api.diagnostics(uuid)
    assert (info["power_state"], info["vcpus"]) == (1, 2)
    used = _used()
    assert used[view["host"]] == idle[view["host"]] + 2048
    events = [e["event"] for a in api.list_actions(uuid) for e in a["events"]]
    assert events[-3:] == [
        "compute_shelve_instance",
        "schedule_instances",
        "compute_unshelve_instance",
    ]
    assert_no_leaks()

    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)
    assert _used() == idle
    assert_no_leaks()


def test_a_gpu_server_gives_its_devices_back_when_offloaded_and_gets_them_on_unshelve(
    two_hosts: Cluster, cleanup: list[str]
) -> None:
    server = _boot("sh2", flavor("sh.gpu", 1, 1024, gpus=1), cleanup)
    uuid = server["uuid"]
    [address] = hostdevs(uuid)
    assert address in HOST_GPUS[server["host"]]
    api.shelve(uuid)
    view = api.wait(uuid, "SHELVED_OFFLOADED", timeout=60)
    assert view["pci_devices"] == []
    assert_no_leaks()
    api.unshelve(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=60)
    [device] = view["pci_devices"]
    assert device["status"] == "allocated"
    assert hostdevs(uuid) == [device["address"]]
    assert device["address"] in HOST_GPUS[view["host"]]
    assert_no_leaks()
