"""``get_host_cpu_stats`` on libvirt's test driver: the frequency is the node XML's, and
the counters follow the simulated host's running guests (``virt.cpu_clock``), where the
test driver's own are four constants."""

from __future__ import annotations

from pathlib import Path

import libvirt

from tests.factories import host_resources
from tests.unit.virt.conftest import UUID_1, UUID_2, MakeDriver
from virt.cpu_clock import SimulatedCpuClock
from virt.driver import GuestSpec, HostCpuStats
from virt.fake import FakeDriver
from virt.host_profile import HostProfile
from virt.node_xml import CPU_MHZ
from virt.simulated import SimulatedHostDriver


def _share(before: HostCpuStats, after: HostCpuStats) -> float:
    """Busy share of the CPU time between two readings."""
    busy = (after.user_ns - before.user_ns) + (after.kernel_ns - before.kernel_ns)
    busy += after.iowait_ns - before.iowait_ns
    total = busy + after.idle_ns - before.idle_ns
    return busy / total


def _guest(uuid: str, vcpus: int) -> GuestSpec:
    return GuestSpec(uuid=uuid, name=f"g-{uuid[:4]}", vcpus=vcpus, memory_mb=512, root_gb=0)


def test_the_test_driver_itself_answers_constant_counters() -> None:
    # What the simulation replaces: the same four numbers on every connection, always.
    conn = libvirt.open("test:///default")
    try:
        first = conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0)
        assert conn.getCPUStats(libvirt.VIR_NODE_CPU_STATS_ALL_CPUS, 0) == first
        assert first["kernel"] > first["user"] + first["idle"]
    finally:
        conn.close()


def test_an_idle_simulated_host_is_all_idle_at_the_node_xml_frequency(
    make_driver: MakeDriver,
) -> None:
    driver = make_driver(HostProfile("h1", vcpus=16))
    first, second = driver.get_host_cpu_stats(), driver.get_host_cpu_stats()
    assert first.frequency_mhz == CPU_MHZ == 2400
    assert (second.user_ns, second.kernel_ns, second.iowait_ns) == (0, 0, 0)
    assert second.idle_ns > first.idle_ns >= 0


def test_running_guests_vcpus_are_the_busy_share(make_driver: MakeDriver) -> None:
    driver = make_driver(HostProfile("h1", vcpus=16))
    driver.spawn(_guest(UUID_1, 4))
    before = driver.get_host_cpu_stats()
    after = driver.get_host_cpu_stats()
    assert _share(before, after) == 4 / 16
    driver.pause(UUID_1)  # a paused guest takes no CPU
    driver.spawn(_guest(UUID_2, 2))
    before = driver.get_host_cpu_stats()
    assert _share(before, driver.get_host_cpu_stats()) == 2 / 16


def test_more_vcpus_than_cpus_keep_the_host_fully_busy(make_driver: MakeDriver) -> None:
    driver = make_driver(HostProfile("h1", vcpus=2))
    driver.spawn(_guest(UUID_1, 4))
    before = driver.get_host_cpu_stats()
    assert _share(before, driver.get_host_cpu_stats()) == 1.0


def test_a_simulated_host_reports_through_its_libvirt_driver(tmp_path: Path) -> None:
    driver = SimulatedHostDriver(HostProfile("h1", vcpus=8), tmp_path / "state")
    try:
        driver.init_host("h1")
        driver.spawn(_guest(UUID_1, 2))
        before = driver.get_host_cpu_stats()
        assert _share(before, driver.get_host_cpu_stats()) == 2 / 8
    finally:
        driver.close()


def test_the_fake_driver_counts_its_running_guests_the_same_way() -> None:
    driver = FakeDriver(host_resources("h1", vcpus=8))
    driver.spawn(_guest(UUID_1, 6))
    before = driver.get_host_cpu_stats()
    assert _share(before, driver.get_host_cpu_stats()) == 6 / 8
    driver.power_off(UUID_1)
    before = driver.get_host_cpu_stats()
    assert _share(before, driver.get_host_cpu_stats()) == 0.0


def test_the_clock_accrues_elapsed_time_at_the_load_given() -> None:
    now = iter([0, 1_000, 3_000, 3_000])
    clock = SimulatedCpuClock(lambda: next(now))
    assert clock.read(4, 1) == (1_000, 3_000)
    assert clock.read(4, 9) == (1_000 + 8_000, 3_000)  # capped at the host's CPUs
    assert clock.read(4, 0) == (9_000, 3_000)  # no time passed
