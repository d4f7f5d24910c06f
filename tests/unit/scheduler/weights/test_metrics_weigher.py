"""MetricsWeigher: Σ metric × ratio of ``[metrics] weight_setting``, Nova's rules for a
missing metric, and the ``metrics_weight_multiplier`` aggregate override."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from novaq.exceptions import ComputeHostMetricNotFound, NoValidHost
from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.weights import load_weighers, weigh_hosts
from scheduler.weights.metrics import MetricsWeigher

Host = Callable[..., HostState]


def stored(values: dict[str, float]) -> str:
    return json.dumps(
        [{"name": n, "value": v, "timestamp": "t", "source": "s"} for n, v in values.items()]
    )


def metrics_settings(*weight_setting: str, **options: Any) -> Settings:
    return Settings(metrics={"weight_setting": list(weight_setting), **options})


def test_raw_value_sums_each_metric_times_its_ratio(make_host: Host, make_spec) -> None:
    weigher = MetricsWeigher(metrics_settings("cpu.frequency=1.0", "cpu.percent=-2.0"))
    host = make_host("a", metrics_json=stored({"cpu.frequency": 2400, "cpu.percent": 0.25}))
    # cpu.percent is stored as a fraction and weighed as a percent (Nova's from_json).
    assert weigher.weigh(host, make_spec()) == 2400 - 2 * 25


def test_percent_metrics_are_rounded_not_truncated(make_host: Host, make_spec) -> None:
    # Nova reads a stored 0.29 as int(0.29 * 100) = 28; novaq reads 29.
    weigher = MetricsWeigher(metrics_settings("cpu.percent=1"))
    host = make_host("a", metrics_json=stored({"cpu.percent": 0.29}))
    assert weigher.weigh(host, make_spec()) == 29


def test_negative_ratio_on_cpu_percent_prefers_idle_hosts(make_host: Host, ranked) -> None:
    config = metrics_settings("cpu.percent=-1.0")
    hosts = [
        make_host("busy", metrics_json=stored({"cpu.percent": 0.9})),
        make_host("idle", metrics_json=stored({"cpu.percent": 0.05})),
        make_host("half", metrics_json=stored({"cpu.percent": 0.5})),
    ]
    assert ranked(["MetricsWeigher"], hosts, config=config) == ["idle", "half", "busy"]


def test_required_metric_missing_fails_the_request_naming_it(make_host: Host, make_spec) -> None:
    config = metrics_settings("cpu.percent=-1.0")
    hosts = [make_host("a", metrics_json=stored({"cpu.percent": 0.5})), make_host("b")]
    with pytest.raises(ComputeHostMetricNotFound, match=r"cpu\.percent .* node b\.b") as info:
        weigh_hosts(load_weighers(config, ["MetricsWeigher"]), hosts, make_spec())
    assert isinstance(info.value, NoValidHost)  # the scheduler's failure path


def test_a_required_metric_missing_fails_even_with_a_zero_multiplier(
    make_host: Host, make_spec
) -> None:
    # As Nova: the weigher runs whatever its multiplier (weigh_hosts skips the other
    # weighers whose every multiplier is 0).
    config = metrics_settings("cpu.percent=-1.0", weight_multiplier=0.0)
    hosts = [make_host("a", metrics_json=stored({"cpu.percent": 0.5})), make_host("b")]
    with pytest.raises(ComputeHostMetricNotFound):
        weigh_hosts(load_weighers(config, ["MetricsWeigher"]), hosts, make_spec())


def test_a_single_candidate_is_not_weighed_so_never_fails(make_host: Host, make_spec) -> None:
    weighers = load_weighers(metrics_settings("cpu.percent=-1.0"), ["MetricsWeigher"])
    assert weigh_hosts(weighers, [make_host("b")], make_spec())[0][0] == 0.0


def test_unavailable_metric_weighs_weight_of_unavailable_when_not_required(
    make_host: Host, make_spec, ranked
) -> None:
    config = metrics_settings("cpu.percent=1.0", required=False)
    weigher = MetricsWeigher(config)
    assert weigher.weigh(make_host("b"), make_spec()) == -10000.0
    hosts = [make_host("none"), make_host("busy", metrics_json=stored({"cpu.percent": 0.9}))]
    assert ranked(["MetricsWeigher"], hosts, config=config) == ["busy", "none"]


def test_unavailable_metric_with_ratio_zero_is_skipped(make_host: Host, make_spec) -> None:
    config = metrics_settings("cpu.percent=0", "cpu.frequency=1", required=False)
    host = make_host("a", metrics_json=stored({"cpu.frequency": 2400}))
    assert MetricsWeigher(config).weigh(host, make_spec()) == 2400


def test_unavailable_metric_with_multiplier_zero_is_skipped(make_host: Host, make_spec) -> None:
    config = metrics_settings("cpu.percent=1", required=False, weight_multiplier=0.0)
    assert MetricsWeigher(config).weigh(make_host("a"), make_spec()) == 0.0


def test_required_is_checked_before_the_ratio(make_host: Host, make_spec) -> None:
    # As Nova: a missing metric raises even when its ratio is 0.
    with pytest.raises(ComputeHostMetricNotFound):
        MetricsWeigher(metrics_settings("cpu.percent=0")).weigh(make_host("a"), make_spec())


def test_aggregate_metadata_overrides_the_multiplier(
    make_host: Host, make_aggregate, make_spec
) -> None:
    weigher = MetricsWeigher(metrics_settings("cpu.percent=1", weight_multiplier=2.0))
    plain = make_host("plain")
    grouped = make_host(
        "grouped",
        aggregates=(
            make_aggregate({"metrics_weight_multiplier": "0.5"}),
            make_aggregate({"metrics_weight_multiplier": "3"}),
        ),
    )
    odd = make_host("odd", aggregates=(make_aggregate({"metrics_weight_multiplier": "x"}),))
    assert weigher.multiplier(plain) == 2.0
    assert weigher.multiplier(grouped) == 0.5  # the smallest
    assert weigher.multiplier(odd) == 2.0  # not a number: the option


def test_defaults_are_nova_s_and_make_the_weigher_inert(make_host: Host, make_spec) -> None:
    options = Settings().metrics
    assert (options.weight_multiplier, options.weight_setting) == (1.0, ())
    assert (options.required, options.weight_of_unavailable) == (True, -10000.0)
    assert "MetricsWeigher" in Settings().filter_scheduler.weight_classes
    weigher = MetricsWeigher(Settings())
    assert weigher.ignores(make_spec())
    hosts = [make_host("a"), make_host("b", metrics_json=stored({"cpu.percent": 0.5}))]
    assert [w for w, _ in weigh_hosts([weigher], hosts, make_spec())] == [0.0, 0.0]


def test_a_metric_named_twice_counts_twice(make_host: Host, make_spec) -> None:
    weigher = MetricsWeigher(metrics_settings("cpu.frequency=1", "cpu.frequency=2"))
    host = make_host("a", metrics_json=stored({"cpu.frequency": 100}))
    assert weigher.weigh(host, make_spec()) == 300
