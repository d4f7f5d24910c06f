"""Fixtures the periodic-task tests share: host1 as a simulated host, and the
notifications a pass sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from virt.host_profile import default_profiles
from virt.simulated import SimulatedHostDriver


@pytest.fixture
def hypervisor(tmp_path: Path) -> Iterator[SimulatedHostDriver]:
    """host1 as a worker runs it: a simulated host (two GPUs) on libvirt's test driver.

    Modules that drive host1 through another driver define their own ``hypervisor``."""
    driver = SimulatedHostDriver(
        default_profiles(1)[0], tmp_path / "hosts" / "host1", instances_path=tmp_path / "inst"
    )
    driver.init_host("host1")
    yield driver
    driver.close()
