"""Resource monitors (Nova's ``nova.compute.monitors``): what the periodic resource audit
records in ``compute_nodes.metrics`` for the MetricsFilter and MetricsWeigher.

``[DEFAULT] compute_monitors`` enables them (none by default, as Nova). novaq has Nova's
one monitor, ``cpu.virt_driver``: it reads the host's cumulative CPU times and frequency
from the driver (``get_host_cpu_stats``) and reports Nova's ten metrics: ``cpu.frequency``
(MHz), ``cpu.user.time``, ``cpu.kernel.time``, ``cpu.idle.time``, ``cpu.iowait.time``
(nanoseconds since the host started) and ``cpu.user.percent``, ``cpu.kernel.percent``,
``cpu.idle.percent``, ``cpu.iowait.percent``, ``cpu.percent`` (user + kernel + iowait):
the shares of the CPU time spent since the previous reading.

The stored form is Nova's: JSON text, a list of ``{name, value, timestamp, source}``
with the percentages as fractions with two decimals (``0.37``); ``[]`` without monitors.

Where novaq differs from Nova, on purpose:

* The previous reading is the one stored on the node, not one kept in the monitor's
  memory, so a restarted worker's first reading still covers only the time since the
  last audit. Counters that went backwards (the host rebooted) count from zero, as
  Nova's first reading does.
* No CPU time since the previous reading (a host whose counters did not move) keeps the
  previous percentages: Nova divides by zero there and stores no metrics at all.
* A driver that cannot read the figures (``HypervisorError``) leaves that monitor's
  metrics out, as Nova (a warning, the audit goes on); nothing else fails.

Each audit that stores metrics sends Nova's versioned ``metrics.update`` notification
(``metrics_payload``), after its transaction commits.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from novaq.exceptions import HypervisorError
from virt.driver import ComputeDriver, HostCpuStats

LOG = logging.getLogger(__name__)

CPU_VIRT_DRIVER: Final = "cpu.virt_driver"
#: Nova's ``source`` of the libvirt driver's metrics (its ``compute_driver`` option).
SOURCE: Final = "libvirt.LibvirtDriver"
TIMES: Final = ("user", "kernel", "idle", "iowait")
#: Metrics stored as fractions (0..1) and read by the scheduler as percents (Nova's
#: ``FIELDS_REQUIRING_CONVERSION``).
PERCENT_METRICS: Final = frozenset(
    (
        "cpu.user.percent",
        "cpu.kernel.percent",
        "cpu.idle.percent",
        "cpu.iowait.percent",
        "cpu.percent",
    )
)
CPU_METRICS: Final = ("cpu.frequency", *(f"cpu.{t}.time" for t in TIMES), *sorted(PERCENT_METRICS))


def read_samples(monitors: Sequence[str], driver: ComputeDriver) -> dict[str, HostCpuStats]:
    """What each enabled monitor reads from the hypervisor, by monitor (call it outside
    any database transaction: it talks to libvirt). A monitor whose reading fails is left
    out, with a warning, as Nova's ``_get_host_metrics``."""
    samples = {}
    if CPU_VIRT_DRIVER in monitors:
        try:
            samples[CPU_VIRT_DRIVER] = driver.get_host_cpu_stats()
        except HypervisorError as exc:
            LOG.warning("Cannot get the metrics from %s; error: %s", CPU_VIRT_DRIVER, exc)
    return samples


def metrics_json(samples: Mapping[str, HostCpuStats], previous_json: str, now: dt.datetime) -> str:
    """The node's new ``metrics`` text from ``samples`` and what it stored before."""
    metrics: list[dict[str, Any]] = []
    stats = samples.get(CPU_VIRT_DRIVER)
    if stats is not None:
        metrics += cpu_metrics(stats, stored_values(previous_json), now)
    return json.dumps(metrics)


def stored_values(text: str | None) -> dict[str, float]:
    """Metric values of a stored ``metrics`` text, as stored (percentages as fractions).
    Text that is not Nova's list of metrics reads as no metrics."""
    try:
        items = json.loads(text or "[]")
    except ValueError:
        return {}
    if not isinstance(items, list):
        return {}
    values = {}
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            value = item.get("value")
            if isinstance(value, int | float) and not isinstance(value, bool):
                values[item["name"]] = float(value)
    return values


def cpu_metrics(
    stats: HostCpuStats, previous: Mapping[str, float], now: dt.datetime
) -> list[dict[str, Any]]:
    """Nova's ``cpu.virt_driver`` metrics of one reading (``previous``: the stored values)."""
    current = {t: getattr(stats, f"{t}_ns") for t in TIMES}
    before = {t: int(previous.get(f"cpu.{t}.time", 0)) for t in TIMES}
    if any(current[t] < before[t] for t in TIMES):
        before = dict.fromkeys(TIMES, 0)  # counters reset: the host restarted
    delta = {t: current[t] - before[t] for t in TIMES}
    elapsed = sum(delta.values())
    values: dict[str, float] = {"cpu.frequency": stats.frequency_mhz}
    values.update({f"cpu.{t}.time": current[t] for t in TIMES})
    if elapsed > 0:
        # As Nova: whole percents (truncated), stored as fractions.
        for t in TIMES:
            values[f"cpu.{t}.percent"] = int(delta[t] * 100 / elapsed) / 100
        busy = delta["user"] + delta["kernel"] + delta["iowait"]
        values["cpu.percent"] = int(busy * 100 / elapsed) / 100
    else:
        for name in PERCENT_METRICS:
            values[name] = previous.get(name, 0.0)
    timestamp = now.strftime("%Y-%m-%dT%H:%M:%S.%f")
    return [
        {"name": name, "value": values[name], "timestamp": timestamp, "source": SOURCE}
        for name in CPU_METRICS
    ]


def metrics_payload(
    host: str, nodename: str, text: str, host_ip: str = ""
) -> dict[str, Any] | None:
    """Nova's versioned ``metrics.update`` payload (``MetricsPayload`` 1.0) for a node's
    stored metrics, or None when it has none (Nova sends nothing then). Values are Nova's
    ``MonitorMetric`` integers: whole percents, nanoseconds, MHz. ``host_ip``: the node's
    (Nova's ``my_ip``)."""
    try:
        items = json.loads(text or "[]")
    except ValueError:
        return None
    if not isinstance(items, list) or not items:
        return None
    values = scheduler_values(text)
    metrics = [
        {
            "nova_object.name": "MetricPayload",
            "nova_object.namespace": "nova",
            "nova_object.version": "1.0",
            "nova_object.data": {
                "name": item["name"],
                "value": int(values[item["name"]]),
                "numa_membw_values": None,
                "timestamp": item.get("timestamp"),
                "source": item.get("source"),
            },
        }
        for item in items
        if isinstance(item, dict) and item.get("name") in values
    ]
    return {
        "nova_object.name": "MetricsPayload",
        "nova_object.namespace": "nova",
        "nova_object.version": "1.0",
        "nova_object.data": {
            "host": host,
            "host_ip": host_ip,
            "nodename": nodename,
            "metrics": metrics,
        },
    }


def scheduler_values(text: str | None) -> dict[str, float]:
    """The metrics of a stored ``metrics`` text as the scheduler weighs them (Nova's
    ``MonitorMetricList.from_json``): percentages back to percents (0..100).

    NOTE: Nova multiplies the stored fraction by 100 and truncates to an integer, so a
    stored 0.29 reads 28 (0.29 * 100 = 28.999999999999996); novaq rounds, reading 29."""
    values = stored_values(text)
    for name in PERCENT_METRICS & values.keys():
        values[name] = float(round(values[name] * 100))
    return values
