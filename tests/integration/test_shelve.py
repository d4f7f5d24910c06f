"""Shelve (offloaded at once, Nova's default) and unshelve across two real hosts, GPUs
included, checked through show, diagnostics and the audit at every stage."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

from novaq.exceptions import FlavorExists
from tests.integration.workers import Cluster
from workflows import api

pytestmark = pytest.mark.integration
GPU_ALIAS = "QuadroM4000-video"
HOST_GPUS = {
    "host1": {"0000:08:00.0", "0000:88:00.0"},
    "host2": {"0000:09:00.0", "0000:89:00.0"},
}


def _flavor(name: str, vcpus: int, memory_mb: int, gpus: int = 0) -> str:
    specs = {"pci_passthrough:alias": f"{GPU_ALIAS}:{gpus}"} if gpus else None
    with contextlib.suppress(FlavorExists):
        api.create_flavor(name, vcpus, memory_mb, 10, extra_specs=specs)
    return name


def _hostdevs(uuid: str) -> set[str]:
    xml = api.diagnostics(uuid)["xml"]
    return {
        f"{int(d, 16):04x}:{int(b, 16):02x}:{int(s, 16):02x}.{int(f, 16)}"
        for d, b, s, f in re.findall(
            r"<address domain='0x([0-9a-f]+)' bus='0x([0-9a-f]+)' slot='0x([0-9a-f]+)' "
            r"function='0x([0-9a-f]+)'",
            xml,
        )
    }


def _clean_audit() -> None:
    report = api.audit()
    assert report["leaks"] == 0, [n["discrepancies"] for n in report["nodes"]]


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
    server = _boot("sh1", _flavor("sh.small", 2, 2048), cleanup)
    uuid, first = server["uuid"], server["host"]
    assert _used()[first] == idle[first] + 2048
    _clean_audit()

    api.shelve(uuid)
    view = api.wait(uuid, "SHELVED_OFFLOADED", timeout=60)
    assert (view["host"], view["node"], view["task_state"]) == (None, None, None)
    assert _used() == idle  # nothing held anywhere while offloaded
    _clean_audit()  # and no guest left behind on the old host

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
    _clean_audit()

    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)
    assert _used() == idle
    _clean_audit()


def test_a_gpu_server_gives_its_devices_back_when_offloaded_and_gets_them_on_unshelve(
    two_hosts: Cluster, cleanup: list[str]
) -> None:
    server = _boot("sh2", _flavor("sh.gpu", 1, 1024, gpus=1), cleanup)
    uuid = server["uuid"]
    assert _hostdevs(uuid) <= HOST_GPUS[server["host"]] and len(_hostdevs(uuid)) == 1
    api.shelve(uuid)
    view = api.wait(uuid, "SHELVED_OFFLOADED", timeout=60)
    assert view["pci_devices"] == []
    _clean_audit()
    api.unshelve(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=60)
    [device] = view["pci_devices"]
    assert device["status"] == "allocated"
    assert _hostdevs(uuid) == {device["address"]} and device["address"] in HOST_GPUS[view["host"]]
    _clean_audit()
