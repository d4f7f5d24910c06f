"""novaq's MetricsFilter and MetricsWeigher against Nova 34's own, case by case: the
filter's verdict, the weigher's raw value (or its refusal, ``ComputeHostMetricNotFound``)
and its multiplier, on randomized ``[metrics]`` options and hosts whose compute node
stores metrics as the ``cpu.virt_driver`` monitor does (``compute.monitors``). Nova runs
in its own virtualenv (``tests/differential/nova_metrics.py``), as for the other filters.

Stored percentages are drawn from those Nova reads back whole: Nova truncates a stored
0.29, 0.57 or 0.58 to 28, 56 or 57 percent (float error), where novaq rounds
(``compute.monitors.scheduler_values``); ``test_nova_truncates_some_stored_percentages``
pins that one difference.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from compute.monitors import CPU_METRICS, PERCENT_METRICS
from novaq.exceptions import ComputeHostMetricNotFound
from novaq.settings import Settings
from scheduler.filters.metrics_filter import MetricsFilter
from scheduler.weights.metrics import MetricsWeigher
from tests.differential.cases import hosts, novaq_host, novaq_spec
from tests.differential.nova_process import NovaProcess, nova_process

BATCH = 40
EXAMPLES = int(os.environ.get("NOVAQ_DIFFERENTIAL_EXAMPLES", "15"))
REQUEST = {"flavor_name": "small", "extra_specs": {}, "image_properties": {}, "hints": {}}
#: Whole percents Nova reads back as stored (int(k / 100 * 100) == k).
EXACT_PERCENTS = [k for k in range(101) if int(k / 100 * 100) == k]
RATIOS = ["-1.0", "0", "0.5", "2", "-0.001", "1e3"]
MULTIPLIER_VALUES = ["0.5", "3", "-1", "0", "x"]


class NovaMetrics:
    """Nova's MetricsFilter verdicts and MetricsWeigher values (``nova_metrics.py``)."""

    def __init__(self, side: NovaProcess) -> None:
        assert side.hello["ready"]
        self.side = side

    def answers(self, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.side.ask(cases, "answers")


@pytest.fixture(scope="module")
def nova() -> Iterator[NovaMetrics]:
    with nova_process("nova_metrics.py") as side:
        yield NovaMetrics(side)


def _metric_value(name: str) -> st.SearchStrategy[float]:
    if name in PERCENT_METRICS:
        return st.sampled_from(EXACT_PERCENTS).map(lambda k: k / 100)
    if name == "cpu.frequency":
        return st.sampled_from([0, 800, 2400, 3600])
    return st.integers(0, 10**15)


@st.composite
def stored_metrics(draw: st.DrawFn) -> str:
    """A compute node's ``metrics`` text: none, or some of the monitor's metrics."""
    names = draw(st.lists(st.sampled_from(CPU_METRICS), unique=True, max_size=len(CPU_METRICS)))
    metrics = [
        {
            "name": name,
            "value": draw(_metric_value(name)),
            "timestamp": "2026-11-24T21:00:00.000000",
            "source": "libvirt.LibvirtDriver",
        }
        for name in names
    ]
    return json.dumps(metrics)


@st.composite
def metrics_options(draw: st.DrawFn) -> dict[str, Any]:
    pair = st.builds(
        lambda name, ratio: f"{name}={ratio}", st.sampled_from(CPU_METRICS), st.sampled_from(RATIOS)
    )
    return {
        "weight_setting": draw(st.lists(pair, max_size=3)),
        "required": draw(st.booleans()),
        "weight_multiplier": draw(st.sampled_from([1.0, 0.0, -2.0, 0.5])),
        "weight_of_unavailable": draw(st.sampled_from([-10000.0, 5.0, 0.0])),
    }


@st.composite
def metrics_hosts(draw: st.DrawFn) -> dict[str, Any]:
    host = draw(hosts())
    host["metrics"] = draw(stored_metrics())
    override = st.fixed_dictionaries(
        {}, optional={"metrics_weight_multiplier": st.sampled_from(MULTIPLIER_VALUES)}
    )
    host["aggregates"] = draw(st.lists(override, max_size=2))
    return host


def _novaq_answer(case: dict[str, Any]) -> dict[str, Any]:
    config = Settings(metrics=case["metrics"])
    host, spec = novaq_host(case["host"]), novaq_spec(REQUEST)
    host.metrics_json = case["host"]["metrics"]
    weigher = MetricsWeigher(config)
    answer: dict[str, Any] = {
        "values": host.metrics,
        "passes": MetricsFilter(config).host_passes(host, spec),
        "multiplier": weigher.multiplier(host),
    }
    try:
        answer["weight"] = weigher.weigh(host, spec)
    except ComputeHostMetricNotFound as exc:
        answer["weight"] = f"raised: ComputeHostMetricNotFound: {exc}"
    return answer


def _plain_host() -> dict[str, Any]:
    """One host in ``cases.hosts``' form, in no aggregate."""
    return {
        "host": "host1",
        "hypervisor_type": "QEMU",
        "hypervisor_version": 6_002_000,
        "cpu_info": {"arch": "x86_64", "features": [], "topology": {"sockets": 1}},
        "vcpus": 8,
        "vcpus_used": 0,
        "memory_mb": 8192,
        "memory_mb_used": 512,
        "local_gb": 100,
        "local_gb_used": 0,
        "num_instances": 0,
        "num_io_ops": 0,
        "supported_instances": [["x86_64", "qemu", "hvm"]],
        "disabled": False,
        "instances": [],
        "aggregates": [],
    }


# A failing batch's repr is long: the assertion's message names the one case that differs.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
def test_metrics_filter_and_weigher_give_nova_s_answers(nova: NovaMetrics) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(st.tuples(metrics_options(), metrics_hosts()), min_size=BATCH, max_size=BATCH))
    def agree(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        cases = [{"metrics": m, "host": h} for m, h in pairs]
        for case, theirs in zip(cases, nova.answers(cases), strict=True):
            ours = _novaq_answer(case)
            assert ours == theirs, (
                f"novaq {ours!r}\nNova {theirs!r}\nmetrics={json.dumps(case['metrics'])}\n"
                f"host metrics={case['host']['metrics']}\naggregates={case['host']['aggregates']}"
            )

    agree()


def test_nova_truncates_some_stored_percentages(nova: NovaMetrics) -> None:
    stored = json.dumps(
        [
            {
                "name": "cpu.percent",
                "value": 0.29,
                "timestamp": "2026-11-24T21:00:00.000000",
                "source": "libvirt.LibvirtDriver",
            }
        ]
    )
    case = {
        "metrics": {"weight_setting": ["cpu.percent=1"]},
        "host": {**_plain_host(), "metrics": stored},
    }
    (theirs,) = nova.answers([case])
    ours = _novaq_answer(case)
    assert (theirs["values"], theirs["weight"]) == ({"cpu.percent": 28}, 28.0)
    assert (ours["values"], ours["weight"]) == ({"cpu.percent": 29.0}, 29.0)
