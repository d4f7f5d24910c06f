"""Fixtures shared by the compute tests: two simulated hosts, ``src`` and ``dst``, each with
its own real instances directory under ``tmp_path`` (the move and delete tests), and the
notifications a test sent."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from compute import notifications
from virt.host_profile import HostProfile
from virt.libvirt.imagebackend import DiskOptions
from virt.simulated import SimulatedHostDriver

Hosts = dict[str, SimulatedHostDriver]
Sent = list[tuple[dict[str, Any], str]]


def simulated_hosts(tmp_path: Path, disk_options: DiskOptions | None = None) -> Iterator[Hosts]:
    """``src`` and ``dst``, each with its own state and instances directory (nothing
    shared), open for the test."""
    drivers = {
        name: SimulatedHostDriver(
            HostProfile(name),
            tmp_path / "state" / name,
            instances_path=tmp_path / name,
            disk_options=disk_options,
        )
        for name in ("src", "dst")
    }
    for name, driver in drivers.items():
        driver.init_host(name)
    yield drivers
    for driver in drivers.values():
        driver.close()


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    yield from simulated_hosts(tmp_path)


@pytest.fixture
def sent() -> Iterator[Sent]:
    """The notifications sent during the test, as (message, priority), in order."""
    messages: Sent = []
    notifications.install(lambda message, priority: messages.append((message, priority)))
    yield messages
    notifications.install(None)
