"""MetricsFilter: hosts must report every metric ``[metrics] weight_setting`` names."""

from __future__ import annotations

import json
from collections.abc import Callable

from scheduler.filters import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


def stored(**values: float) -> str:
    """A node's ``metrics`` text as the monitor stores it (names with dots as __)."""
    return json.dumps(
        [
            {"name": name.replace("__", "."), "value": value, "timestamp": "t", "source": "s"}
            for name, value in values.items()
        ]
    )


WEIGH_TWO = {"metrics": {"weight_setting": ["cpu.percent=-1.0", "cpu.frequency=1.0"]}}


def test_a_host_reporting_every_weighed_metric_passes(
    make_filter: Callable[..., BaseFilter], host: Callable[..., HostState], spec
) -> None:
    flt = make_filter("MetricsFilter", **WEIGH_TWO)
    reporting = host(metrics_json=stored(cpu__percent=0.5, cpu__frequency=2400, cpu__idle__time=1))
    assert flt.host_passes(reporting, spec())


def test_a_host_missing_one_weighed_metric_is_refused(
    make_filter: Callable[..., BaseFilter], host: Callable[..., HostState], spec
) -> None:
    flt = make_filter("MetricsFilter", **WEIGH_TWO)
    assert not flt.host_passes(host(metrics_json=stored(cpu__percent=0.5)), spec())
    assert not flt.host_passes(host(), spec())  # no monitor: "[]"


def test_without_weight_setting_every_host_passes_without_being_asked(
    make_filter: Callable[..., BaseFilter], host: Callable[..., HostState], spec
) -> None:
    flt = make_filter("MetricsFilter")
    request: RequestSpec = spec()
    assert flt.ignores(request)
    assert flt.filter_all([host(metrics_json="not json")], request) != []
    assert flt.host_passes(host(), request)


def test_a_metric_weighed_with_ratio_zero_is_still_required(
    make_filter: Callable[..., BaseFilter], host: Callable[..., HostState], spec
) -> None:
    flt = make_filter("MetricsFilter", metrics={"weight_setting": "cpu.percent=0"})
    assert not flt.host_passes(host(), spec())
    assert flt.host_passes(host(metrics_json=stored(cpu__percent=0.0)), spec())


def test_unreadable_stored_metrics_count_as_none(
    make_filter: Callable[..., BaseFilter], host: Callable[..., HostState], spec
) -> None:
    flt = make_filter("MetricsFilter", **WEIGH_TWO)
    for text in ("not json", "{}", '[{"value": 1}]', '[{"name": "cpu.percent", "value": "x"}]'):
        assert not flt.host_passes(host(metrics_json=text), spec()), text


def test_the_filter_is_not_run_on_a_rebuild() -> None:
    from scheduler.rebuild import RUN_ON_REBUILD

    assert "MetricsFilter" not in RUN_ON_REBUILD
