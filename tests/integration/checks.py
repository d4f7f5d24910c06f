"""Checks the integration tests share: servers booted for one test, each host's memory
in use, the guest's PCI devices as libvirt has them, the GPU flavors, and the accounting
audit reported as its leaks only."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable
from typing import Any

from novaq.exceptions import FlavorExists
from workflows import api

GPU_ALIAS = "QuadroM4000-video"
_PCI_ADDRESS = re.compile(
    r"<address domain='0x([0-9a-f]+)' bus='0x([0-9a-f]+)' slot='0x([0-9a-f]+)' "
    r"function='0x([0-9a-f]+)'"
)


def flavor(name: str, vcpus: int, memory_mb: int, gpus: int = 0) -> str:
    """Create the flavor once (10 GB root disk, ``gpus`` passthrough GPUs) and name it."""
    specs = {"pci_passthrough:alias": f"{GPU_ALIAS}:{gpus}"} if gpus else None
    with contextlib.suppress(FlavorExists):
        api.create_flavor(name, vcpus, memory_mb, 10, extra_specs=specs)
    return name


def boot_active(name: str, flavor: str, cleanup: list[str]) -> dict[str, Any]:
    """Boot one server, have ``cleanup`` delete it after the test, wait for ACTIVE."""
    [uuid] = api.boot(name, flavor, "cirros")
    cleanup.append(uuid)
    return api.wait(uuid, "ACTIVE", timeout=60)


def memory_used() -> dict[str, int]:
    """Each host's ``memory_mb_used``, reserved memory included."""
    return {h["host"]: h["memory_mb_used"] for h in api.list_hosts()}


def hostdevs(uuid: str) -> list[str]:
    """The PCI addresses in the guest's live domain XML, as the host's libvirt has it."""
    xml = api.diagnostics(uuid)["xml"]
    return sorted(
        f"{int(d, 16):04x}:{int(b, 16):02x}:{int(s, 16):02x}.{int(f, 16)}"
        for d, b, s, f in _PCI_ADDRESS.findall(xml)
    )


def leaks(report: dict[str, Any], hosts: Iterable[str] | None = None) -> list[str]:
    """The audit's leak findings, one line each, on ``hosts`` (all nodes when None).

    Only leaks: a warning such as a stopped host's missing hypervisor view is not an
    accounting error, and the full report is too long for an assertion message to show.
    """
    wanted = set(hosts) if hosts is not None else None
    return [
        f"{node['host']}: {f['kind']} {f['consumer']}: {f['detail']}"
        for node in report["nodes"]
        if wanted is None or node["host"] in wanted
        for f in node["discrepancies"]
        if f["severity"] == "leak"
    ]


def assert_no_leaks(hosts: Iterable[str] = ("host1", "host2")) -> None:
    """The audit finds no accounting error on the test's own hosts (other tests' hosts,
    stopped by now, are not this test's business)."""
    # Only these hosts are asked: other tests' hosts may be up in the database but serve
    # a broker this test does not publish to.
    hosts = list(hosts)
    found = leaks(api.audit(hosts=hosts), hosts)
    assert found == [], found


def wait_schedulable_hosts(hosts: Iterable[str], timeout_s: float = 30.0) -> None:
    """Wait until the hosts the scheduler may pick (compute services up and enabled) are
    exactly ``hosts``: an earlier test's host whose worker just stopped still counts as up
    for ``service_down_time``, and would take a server the test means for its own hosts."""
    wanted = set(hosts)
    deadline = time.monotonic() + timeout_s
    while True:
        schedulable = {
            s["host"]
            for s in api.list_services()
            if s["binary"] == "novaq-compute" and s["up"] and s["status"] == "enabled"
        }
        if schedulable == wanted:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"schedulable hosts {sorted(schedulable)}, not {sorted(wanted)}")
        time.sleep(0.5)
