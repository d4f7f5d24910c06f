"""AggregateImagePropertiesIsolation and the weighers against Nova 34's own classes, on
randomized cases (``tests/differential/image_weigher_cases.py``; Nova's side:
``tests/differential/nova_image_weighers.py``, in the Nova virtualenv of
``scripts/nova-venv``).

The filter: the same verdict, or both sides refuse the image (novaq when it is stored,
``workflows.api.images_store.check_properties``; Nova when it builds its image metadata).
The weighers: each one's raw value per host (before normalisation, Nova's
``_weigh_object``) and its multiplier per host (aggregate overrides included) are the
same. Nova's ImagePropertiesWeigher weighs only while its option is not 0, so both sides
set it to 1 here (novaq also weighs with the option at 0 when an aggregate overrides it:
see that weigher's docstring).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from novaq.exceptions import InvalidImage
from novaq.settings_groups import ALL_WEIGHERS
from scheduler.filters import load_filters
from scheduler.weights import load_weighers
from tests.differential.image_weigher_cases import (
    isolation_cases,
    novaq_isolation_host,
    novaq_isolation_settings,
    novaq_spec,
    novaq_weigher_host,
    novaq_weigher_settings,
    weigher_cases,
)
from tests.differential.nova_process import NovaProcess, nova_process
from workflows.api.images_store import check_properties

# Every weigher but MetricsWeigher (compared in test_metrics_agree_with_nova.py).
WEIGHERS = [w for w in ALL_WEIGHERS if w != "MetricsWeigher"]
BATCH = 40
EXAMPLES = int(os.environ.get("NOVAQ_DIFFERENTIAL_EXAMPLES", "15"))


def _run(examples: int) -> Any:
    return settings(
        max_examples=max(examples, 1),
        deadline=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class NovaSide:
    """Nova's image-isolation verdicts and weigher values (``nova_image_weighers.py``)."""

    def __init__(self, side: NovaProcess) -> None:
        self.side = side
        self.weighers = set(side.hello["weighers"])

    def answers(self, cases: list[dict[str, Any]]) -> list[Any]:
        return self.side.ask(cases, "answers")


@pytest.fixture(scope="module")
def nova() -> Iterator[NovaSide]:
    with nova_process("nova_image_weighers.py") as side:
        yield NovaSide(side)


def _refused(case: dict[str, Any]) -> str | None:
    try:
        check_properties(case["image_properties"])
    except InvalidImage as exc:
        return f"invalid: {exc}"
    return None


def _novaq_verdict(case: dict[str, Any]) -> bool | str:
    refused = _refused(case)
    if refused:
        return refused
    (flt,) = load_filters(novaq_isolation_settings(case), ["AggregateImagePropertiesIsolation"])
    return flt.host_passes(novaq_isolation_host(case), novaq_spec(case))


def _novaq_weights(case: dict[str, Any]) -> dict[str, Any] | str:
    refused = _refused(case)
    if refused:
        return refused
    weighers = load_weighers(novaq_weigher_settings(case), WEIGHERS)
    hosts = [novaq_weigher_host(h) for h in case["hosts"]]
    spec = novaq_spec(case)
    return {
        "raw": {type(w).__name__: w.weigh_all(hosts, spec) for w in weighers},
        "multipliers": {type(w).__name__: [w.multiplier(h) for h in hosts] for w in weighers},
    }


def _same(novaq: Any, nova: Any) -> bool:
    if isinstance(novaq, str) or isinstance(nova, str):
        return isinstance(novaq, str) and isinstance(nova, str)  # both refuse the image
    if isinstance(novaq, bool):
        return novaq == nova
    return all(
        _close(novaq[part][name], nova[part][name])
        for part in ("raw", "multipliers")
        for name in WEIGHERS
    )


def _close(ours: list[float], theirs: list[float]) -> bool:
    return len(ours) == len(theirs) and all(
        math.isclose(a, b) for a, b in zip(ours, theirs, strict=True)
    )


def _differences(novaq: Any, nova: Any) -> Any:
    if isinstance(novaq, dict) and isinstance(nova, dict):
        return {
            f"{part} {name}": (novaq[part][name], nova[part][name])
            for part in ("raw", "multipliers")
            for name in WEIGHERS
            if novaq[part][name] != nova[part][name]
        }
    return (novaq, nova)


def test_nova_has_every_weigher_compared(nova: NovaSide) -> None:
    assert set(WEIGHERS) <= nova.weighers


def _compare(nova: NovaSide, cases: list[dict[str, Any]], ours: Any) -> None:
    for case, theirs in zip(cases, nova.answers(cases), strict=True):
        mine = ours(case)
        assert _same(mine, theirs), (
            f"novaq vs Nova: {_differences(mine, theirs)!r}\ncase={json.dumps(case)}"
        )


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
def test_aggregate_image_properties_isolation_gives_nova_s_verdicts(nova: NovaSide) -> None:
    # Twice as many: a verdict is cheap, and most cases leave the host passing.
    @_run(EXAMPLES * 2)
    @given(st.lists(isolation_cases(), min_size=BATCH, max_size=BATCH))
    def agree(cases: list[dict[str, Any]]) -> None:
        _compare(nova, cases, _novaq_verdict)

    agree()


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
def test_each_weigher_gives_nova_s_raw_values_and_multipliers(nova: NovaSide) -> None:
    # Half as many: each case weighs up to three hosts with twelve weighers.
    @_run(EXAMPLES // 2)
    @given(st.lists(weigher_cases(), min_size=BATCH, max_size=BATCH))
    def agree(cases: list[dict[str, Any]]) -> None:
        _compare(nova, cases, _novaq_weights)

    agree()
