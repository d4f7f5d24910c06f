"""Fixtures shared by the compute tests: two simulated hosts, ``src`` and ``dst``, each with
its own real instances directory under ``tmp_path`` (the move and delete tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from virt.host_profile import HostProfile
from virt.simulated import SimulatedHostDriver

Hosts = dict[str, SimulatedHostDriver]


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    drivers = {
        name: SimulatedHostDriver(
            HostProfile(name), tmp_path / "state" / name, instances_path=tmp_path / name
        )
        for name in ("src", "dst")
    }
    for name, driver in drivers.items():
        driver.init_host(name)
    yield drivers
    for driver in drivers.values():
        driver.close()
