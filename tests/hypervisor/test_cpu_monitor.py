"""The ``cpu.virt_driver`` monitor on the real hypervisor: novaq's libvirt driver reads
the host's own CPU counters (libvirt's ``virNodeGetCPUStats``, from ``/proc/stat``), and
the monitor turns two readings into Nova's metrics. No cluster: the driver on
``qemu:///system``, checked against ``/proc/stat`` read around it."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import pytest

from compute.monitors import CPU_METRICS, metrics_json, scheduler_values
from virt.driver import HostCpuStats
from virt.libvirt.driver import LibvirtDriver

pytestmark = pytest.mark.hypervisor

NS_PER_TICK = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _proc_stat_ns() -> dict[str, int]:
    """The machine's CPU times in ns, summed as libvirt sums them on Linux."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    ticks = {
        "user": user + nice,
        "kernel": system + irq + softirq,
        "idle": idle,
        "iowait": iowait,
    }
    return {mode: value * NS_PER_TICK for mode, value in ticks.items()}


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_the_driver_reads_the_host_s_real_cpu_counters(hypervisor: str, tmp_path: Path) -> None:
    driver = LibvirtDriver(hypervisor, instances_path=tmp_path)
    try:
        before = _proc_stat_ns()
        stats = driver.get_host_cpu_stats()
        after = _proc_stat_ns()
        node_mhz = driver.host.get_node_info().mhz
        _spin(0.3)
        later = driver.get_host_cpu_stats()
    finally:
        driver.close()
    for mode in ("user", "kernel", "idle", "iowait"):
        value = getattr(stats, f"{mode}_ns")
        assert before[mode] <= value <= after[mode], mode
    assert stats.frequency_mhz == node_mhz > 0
    assert later.user_ns > stats.user_ns  # real counters move (the test driver's do not)
    _check_metrics(stats, later)


def _check_metrics(first: HostCpuStats, second: HostCpuStats) -> None:
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    stored = metrics_json({"cpu.virt_driver": first}, "[]", now)
    text = metrics_json({"cpu.virt_driver": second}, stored, now)
    metrics = {m["name"]: m["value"] for m in json.loads(text)}
    assert list(metrics) == list(CPU_METRICS)
    shares = [metrics[f"cpu.{mode}.percent"] for mode in ("user", "kernel", "idle", "iowait")]
    assert all(0.0 <= share <= 1.0 for share in shares)
    assert 0.95 <= sum(shares) <= 1.0  # four whole percents, each truncated
    assert metrics["cpu.percent"] > 0.0  # this test spun a CPU meanwhile
    percent = scheduler_values(text)["cpu.percent"]
    assert percent == round(metrics["cpu.percent"] * 100)
