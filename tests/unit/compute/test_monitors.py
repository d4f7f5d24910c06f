"""The ``cpu.virt_driver`` monitor (``compute.monitors``): Nova's metrics, stored on the
compute node by the resource audit, read by the scheduler's candidates, and acted on by
the MetricsFilter and MetricsWeigher."""

from __future__ import annotations

import datetime as dt
import json
import uuid as uuid_module
from typing import Any

import pytest
from sqlalchemy import select

from compute import notifications
from compute.monitors import CPU_METRICS, cpu_metrics, metrics_json, scheduler_values
from compute.resource_tracker import update_available_resource
from compute.servicegroup import COMPUTE, register_service
from compute.sessions import sessions_for
from models import Allocation, ComputeNode
from models.db import session_scope
from novaq.exceptions import ComputeHostMetricNotFound, HypervisorError
from scheduler.candidates import load_candidates
from scheduler.manager import Scheduler
from tests.factories import host_resources, make_instance, make_settings, spec_for
from virt.driver import GuestSpec, HostCpuStats
from virt.fake import FakeDriver

NOW = dt.datetime(2026, 11, 24, 21, 0, 0, 123456)
SECOND = 1_000_000_000


def _values(metrics: list[dict[str, object]]) -> dict[str, object]:
    return {str(m["name"]): m["value"] for m in metrics}


def test_first_reading_reports_nova_s_ten_metrics_over_the_time_since_boot() -> None:
    stats = HostCpuStats(
        user_ns=30 * SECOND, kernel_ns=10 * SECOND, idle_ns=55 * SECOND, iowait_ns=5 * SECOND,
        frequency_mhz=2400,
    )  # fmt: skip
    metrics = cpu_metrics(stats, {}, NOW)
    assert [m["name"] for m in metrics] == list(CPU_METRICS)
    assert len(CPU_METRICS) == 10
    assert _values(metrics) == {
        "cpu.frequency": 2400,
        "cpu.user.time": 30 * SECOND,
        "cpu.kernel.time": 10 * SECOND,
        "cpu.idle.time": 55 * SECOND,
        "cpu.iowait.time": 5 * SECOND,
        "cpu.user.percent": 0.30,
        "cpu.kernel.percent": 0.10,
        "cpu.idle.percent": 0.55,
        "cpu.iowait.percent": 0.05,
        "cpu.percent": 0.45,
    }
    assert {(m["timestamp"], m["source"]) for m in metrics} == {
        ("2026-11-24T21:00:00.123456", "libvirt.LibvirtDriver")
    }


def test_later_readings_cover_the_time_since_the_stored_one() -> None:
    first = _values(cpu_metrics(HostCpuStats(0, 0, 100 * SECOND, 0, 2400), {}, NOW))
    second = HostCpuStats(75 * SECOND, 0, 125 * SECOND, 0, 2400)  # 75 busy of the next 100 s
    values = _values(cpu_metrics(second, first, NOW))  # type: ignore[arg-type]
    assert (values["cpu.percent"], values["cpu.idle.percent"]) == (0.75, 0.25)


def test_counters_that_went_backwards_count_from_zero() -> None:
    before = {"cpu.user.time": 500.0 * SECOND, "cpu.idle.time": 500.0 * SECOND}
    values = _values(cpu_metrics(HostCpuStats(SECOND, 0, 3 * SECOND, 0, 2400), before, NOW))
    assert values["cpu.percent"] == 0.25


def test_no_time_since_the_stored_reading_keeps_its_percentages() -> None:
    first = _values(cpu_metrics(HostCpuStats(SECOND, 0, 3 * SECOND, 0, 2400), {}, NOW))
    again = _values(cpu_metrics(HostCpuStats(SECOND, 0, 3 * SECOND, 0, 2400), first, NOW))  # type: ignore[arg-type]
    assert again["cpu.percent"] == 0.25 and again["cpu.user.time"] == SECOND


def test_percentages_are_whole_percents_truncated_as_nova_s() -> None:
    values = _values(cpu_metrics(HostCpuStats(2, 0, 1, 0, 2400), {}, NOW))
    assert values["cpu.percent"] == 0.66


def test_the_scheduler_reads_percentages_as_percents() -> None:
    text = metrics_json({"cpu.virt_driver": HostCpuStats(29, 0, 71, 0, 1800)}, "[]", NOW)
    values = scheduler_values(text)
    assert (values["cpu.percent"], values["cpu.idle.percent"]) == (29.0, 71.0)
    assert values["cpu.frequency"] == 1800


# -- the resource audit ----------------------------------------------------------------


def _stored(db_url: str, host: str) -> list[dict[str, object]]:
    with session_scope(db_url) as session:
        node = session.scalars(select(ComputeNode).where(ComputeNode.host == host)).one()
        return list(json.loads(node.metrics))


def _driver(name: str, vcpus: int = 8) -> FakeDriver:
    return FakeDriver(host_resources(name, vcpus=vcpus))


def _run_guest(driver: FakeDriver, vcpus: int) -> None:
    uuid = str(uuid_module.uuid4())
    driver.spawn(GuestSpec(uuid=uuid, name="g", vcpus=vcpus, memory_mb=512, root_gb=0))


def test_without_monitors_the_audit_stores_no_metrics(db_url: str) -> None:
    update_available_resource(sessions_for(db_url), _driver("h1"), "h1", make_settings())
    assert _stored(db_url, "h1") == []


def test_the_audit_stores_the_monitor_s_metrics_on_the_node(db_url: str) -> None:
    settings = make_settings(compute_monitors=["cpu.virt_driver"])
    driver = _driver("h1", vcpus=8)
    _run_guest(driver, 2)
    update_available_resource(sessions_for(db_url), driver, "h1", settings)
    update_available_resource(sessions_for(db_url), driver, "h1", settings)
    values = _values(_stored(db_url, "h1"))
    assert set(values) == set(CPU_METRICS)
    assert (values["cpu.percent"], values["cpu.frequency"]) == (0.25, 2400)
    _run_guest(driver, 4)
    update_available_resource(sessions_for(db_url), driver, "h1", settings)
    assert _values(_stored(db_url, "h1"))["cpu.percent"] == 0.75


def test_a_driver_that_cannot_read_cpu_stats_leaves_the_metrics_out(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    class NoCpuStats(FakeDriver):
        def get_host_cpu_stats(self) -> HostCpuStats:
            raise HypervisorError(reason="not supported")

    settings = make_settings(compute_monitors=["cpu.virt_driver"])
    driver = NoCpuStats(host_resources("h1"))
    assert update_available_resource(sessions_for(db_url), driver, "h1", settings) == []
    assert _stored(db_url, "h1") == []
    assert "Cannot get the metrics from cpu.virt_driver" in caplog.text


def test_the_scheduler_prefers_the_idle_host_by_its_metrics(db_url: str) -> None:
    monitors = make_settings(compute_monitors=["cpu.virt_driver"])
    with session_scope(db_url) as session:
        for name in ("busy", "idle", "half", "blind"):
            register_service(session, name, COMPUTE, f"compute.{name}", monitors)
    for name, busy_vcpus in (("busy", 6), ("idle", 1), ("half", 4)):
        driver = _driver(name, vcpus=8)
        _run_guest(driver, busy_vcpus)
        update_available_resource(sessions_for(db_url), driver, name, monitors)
        update_available_resource(sessions_for(db_url), driver, name, monitors)
    update_available_resource(sessions_for(db_url), _driver("blind"), "blind", make_settings())
    settings = make_settings(
        metrics={"weight_setting": ["cpu.percent=-1.0"]},
        filter_scheduler={
            "enabled_filters": ["ComputeFilter", "MetricsFilter"],
            "weight_classes": ["MetricsWeigher"],
        },
    )
    with session_scope(db_url) as session:
        hosts = {h.host: h for h in load_candidates(session, settings).hosts}
    assert {name: h.metrics.get("cpu.percent") for name, h in hosts.items()} == {
        "busy": 75.0,
        "idle": 12.0,
        "half": 50.0,
        "blind": None,
    }
    uuid = make_instance(db_url)
    selection = Scheduler(settings).select_and_claim(sessions_for(db_url), spec_for(uuid))
    assert selection is not None and selection.host == "idle"


def test_an_audit_with_metrics_sends_nova_s_metrics_update_after_storing_them(
    db_url: str,
) -> None:
    sent: list[tuple[dict[str, Any], str]] = []
    notifications.install(lambda message, priority: sent.append((message, priority)))
    try:
        driver = _driver("h1", vcpus=4)
        update_available_resource(sessions_for(db_url), driver, "h1", make_settings())
        assert sent == []  # no monitor, no metrics, no notification (as Nova)
        settings = make_settings(compute_monitors=["cpu.virt_driver"])
        _run_guest(driver, 1)
        update_available_resource(sessions_for(db_url), driver, "h1", settings)
    finally:
        notifications.install(None)
    ((message, priority),) = sent
    assert (message["event_type"], priority) == ("metrics.update", "INFO")
    payload = message["payload"]
    assert (payload["nova_object.name"], payload["nova_object.version"]) == (
        "MetricsPayload",
        "1.0",
    )
    data = payload["nova_object.data"]
    assert (data["host"], data["nodename"]) == ("h1", "h1")
    with session_scope(db_url) as session:
        node_ip = session.scalars(select(ComputeNode.host_ip).where(ComputeNode.host == "h1")).one()
    assert data["host_ip"] == node_ip and node_ip  # the address the audit recorded
    values = {
        m["nova_object.data"]["name"]: m["nova_object.data"]["value"] for m in data["metrics"]
    }
    assert values == {k: int(v) for k, v in scheduler_values(_metrics_text(db_url)).items()}
    assert values["cpu.percent"] == 25 and values["cpu.frequency"] == 2400


def _metrics_text(db_url: str) -> str:
    return json.dumps(_stored(db_url, "h1"))


def test_a_required_metric_a_candidate_lacks_fails_the_request_and_claims_nothing(
    db_url: str,
) -> None:
    monitors = make_settings(compute_monitors=["cpu.virt_driver"])
    with session_scope(db_url) as session:
        for name in ("seen", "blind"):
            register_service(session, name, COMPUTE, f"compute.{name}", monitors)
    update_available_resource(sessions_for(db_url), _driver("seen"), "seen", monitors)
    update_available_resource(sessions_for(db_url), _driver("blind"), "blind", make_settings())
    settings = make_settings(
        metrics={"weight_setting": ["cpu.percent=-1.0"]},  # required, no MetricsFilter
        filter_scheduler={
            "enabled_filters": ["ComputeFilter"],
            "weight_classes": ["MetricsWeigher"],
        },
    )
    uuid = make_instance(db_url)
    with pytest.raises(ComputeHostMetricNotFound, match=r"cpu\.percent .* node blind\.blind"):
        Scheduler(settings).select_and_claim(sessions_for(db_url), spec_for(uuid))
    with session_scope(db_url) as session:
        assert session.scalars(select(Allocation)).all() == []
