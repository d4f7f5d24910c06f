"""Shelve (offloaded at once, Nova's default) and unshelve across two real hosts, GPUs
included, checked through show, diagnostics and the audit at every stage."""

from __future__ import annotations

import pytest

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
HOST_GPUS = {
    "host1": {"0000:08:00.0", "0000:88:00.0"},
    "host2": {"0000:09:00.0", "0000:89:00.0"},
}


def test_shelve_offloads_then_unshelve_lands_on_a_host_and_runs(
    two_hosts: Cluster, cleanup: list[str]
) -> None:
    idle = memory_used()
    server = boot_active("sh1", flavor("sh.small", 2, 2048), cleanup)
    uuid, first = server["uuid"], server["host"]
    assert memory_used()[first] == idle[first] + 2048
    assert_no_leaks()

    api.shelve(uuid)
    view = api.wait(uuid, "SHELVED_OFFLOADED", timeout=60)
    assert (view["host"], view["node"], view["task_state"]) == (None, None, None)
    assert memory_used() == idle  # nothing held anywhere while offloaded
    assert_no_leaks()  # and no guest left behind on the old host

    api.unshelve(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=60)
    assert view["host"] in ("host1", "host2")
    info = api.diagnostics(uuid)
    assert (info["power_state"], info["vcpus"]) == (1, 2)
    used = memory_used()
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
    assert memory_used() == idle
    assert_no_leaks()


def test_a_gpu_server_gives_its_devices_back_when_offloaded_and_gets_them_on_unshelve(
    two_hosts: Cluster, cleanup: list[str]
) -> None:
    server = boot_active("sh2", flavor("sh.gpu", 1, 1024, gpus=1), cleanup)
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
