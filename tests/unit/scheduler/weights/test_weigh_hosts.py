"""The handler: Nova's normalisation, summing, per-aggregate multipliers, loading."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ClassVar

import pytest

from novaq.exceptions import ConfigError
from novaq.settings import ALL_WEIGHERS
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights import BaseWeigher, _registry, load_weighers, normalize, weigh_hosts
from scheduler.weights.ram import RAMWeigher

Host = Callable[..., HostState]


class _Raw(BaseWeigher):
    """Weighs hosts by a fixed table, counting its calls."""

    def __init__(self, values: dict[str, float], multiplier: float = 1.0) -> None:
        self.values = values
        self._multiplier = multiplier
        self.calls = 0

    def multiplier(self, host: HostState) -> float:
        return self._multiplier

    def weigh(self, host: HostState, spec: RequestSpec) -> float:
        self.calls += 1
        return self.values[host.host]


class _Bounded(_Raw):
    minval: ClassVar[float | None] = 0
    maxval: ClassVar[float | None] = 10


# --- normalize ---------------------------------------------------------------------------


def test_normalize_uses_the_list_range_without_bounds() -> None:
    assert normalize([], None, None) == []
    assert normalize([0, 5, 10], None, None) == [0.0, 0.5, 1.0]
    assert normalize([-4, 0, 4], None, None) == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("values", [[3, 3, 3], [7], [-2.5, -2.5]])
def test_normalize_all_equal_is_zero(values: list[float]) -> None:
    assert normalize(values, None, None) == [0.0] * len(values)


def test_normalize_minval_is_the_bottom_of_the_range_and_clamps() -> None:
    assert normalize([50, 100], 0, None) == [0.5, 1.0]
    assert normalize([-10, 10], 0, None) == [0.0, 1.0]
    assert normalize([-10, -5], 0, None) == [0.0, 0.0]  # both clamp to 0: all equal
    assert normalize([7], 0, None) == [1.0]


def test_normalize_maxval_is_the_top_of_the_range_and_clamps() -> None:
    assert normalize([0, 5, 20], None, 10) == [0.0, 0.5, 1.0]
    assert normalize([0, 5, 20], 0, 10) == [0.0, 0.5, 1.0]
    assert normalize([12, 20], None, 10) == [0.0, 0.0]


# --- weigh_hosts -------------------------------------------------------------------------


def test_weights_are_normalised_multiplied_and_summed(make_host: Host, make_spec) -> None:
    hosts = [make_host("a"), make_host("b"), make_host("c")]
    first = _Raw({"a": 0, "b": 5, "c": 10}, multiplier=2.0)
    second = _Raw({"a": 30, "b": 10, "c": 20}, multiplier=3.0)
    weighed = weigh_hosts([first, second], hosts, make_spec())
    assert [(w, h.host) for w, h in weighed] == [(3.5, "c"), (3.0, "a"), (1.0, "b")]


def test_bounded_weigher_clamps_raw_values(make_host: Host, make_spec) -> None:
    hosts = [make_host("low"), make_host("mid"), make_host("high")]
    weigher = _Bounded({"low": -5, "mid": 5, "high": 50})
    weighed = {h.host: w for w, h in weigh_hosts([weigher], hosts, make_spec())}
    assert weighed == {"low": 0.0, "mid": 0.5, "high": 1.0}


def test_equal_weights_keep_the_candidates_order(make_host: Host, make_spec) -> None:
    hosts = [make_host(n) for n in ("c", "a", "b")]
    weighed = weigh_hosts([_Raw({"a": 1, "b": 1, "c": 1})], hosts, make_spec())
    assert [(w, h.host) for w, h in weighed] == [(0.0, "c"), (0.0, "a"), (0.0, "b")]


def test_a_single_candidate_is_not_weighed(make_host: Host, make_spec) -> None:
    weigher = _Bounded({"only": 10})
    assert [(w, h.host) for w, h in weigh_hosts([weigher], [make_host("only")], make_spec())] == [
        (0.0, "only")
    ]
    assert weigher.calls == 0
    assert weigh_hosts([weigher], [], make_spec()) == []


def test_negative_multipliers_stack_instead_of_spreading(
    make_host: Host, make_settings, ranked
) -> None:
    hosts = [
        make_host("empty"),
        make_host("half", memory_mb_used=4096, vcpus_used=4, local_gb_used=50),
        make_host("nearly-full", memory_mb_used=7680, vcpus_used=7, local_gb_used=90),
    ]
    names = ["RAMWeigher", "CPUWeigher", "DiskWeigher"]
    assert ranked(names, hosts) == ["empty", "half", "nearly-full"]
    stacking = make_settings(
        ram_weight_multiplier=-1.0, cpu_weight_multiplier=-1.0, disk_weight_multiplier=-1.0
    )
    assert ranked(names, hosts, config=stacking) == ["nearly-full", "half", "empty"]


# --- per-aggregate multiplier --------------------------------------------------------------


def test_multiplier_defaults_to_the_setting(make_host: Host, make_settings) -> None:
    weigher = RAMWeigher(make_settings(ram_weight_multiplier=2.5))
    assert weigher.multiplier(make_host("h")) == 2.5


def test_aggregate_metadata_with_the_option_name_overrides_it(
    make_host: Host, make_aggregate, make_settings
) -> None:
    weigher = RAMWeigher(make_settings(ram_weight_multiplier=2.5))
    unrelated = make_aggregate({"cpu_weight_multiplier": "-7", "ssd": "true"})
    override = make_aggregate({"ram_weight_multiplier": "-1.5"})
    assert weigher.multiplier(make_host("h", aggregates=(unrelated,))) == 2.5
    assert weigher.multiplier(make_host("h", aggregates=(unrelated, override))) == -1.5


def test_several_aggregates_smallest_value_wins(
    make_host: Host, make_aggregate, make_settings
) -> None:
    weigher = RAMWeigher(make_settings())
    aggregates = (
        make_aggregate({"ram_weight_multiplier": "4"}),
        make_aggregate({"ram_weight_multiplier": "-3.0"}),
        make_aggregate({"ram_weight_multiplier": "0.5"}),
    )
    assert weigher.multiplier(make_host("h", aggregates=aggregates)) == -3.0


@pytest.mark.parametrize("bad", ["lots", "", "nan", "inf", "1,5"])
def test_invalid_metadata_value_is_ignored(
    make_host: Host, make_aggregate, make_settings, caplog: pytest.LogCaptureFixture, bad: str
) -> None:
    weigher = RAMWeigher(make_settings(ram_weight_multiplier=2.0))
    host = make_host("h", aggregates=(make_aggregate({"ram_weight_multiplier": bad}),))
    with caplog.at_level(logging.WARNING, logger="scheduler.weights"):
        assert weigher.multiplier(host) == 2.0
    assert "ram_weight_multiplier" in caplog.text


def test_one_invalid_value_drops_the_whole_override_as_nova(
    make_host: Host, make_aggregate, make_settings
) -> None:
    # Nova's validate_num_values casts every value; one failure means the setting is used.
    weigher = RAMWeigher(make_settings(ram_weight_multiplier=2.0))
    aggregates = (
        make_aggregate({"ram_weight_multiplier": "-1"}),
        make_aggregate({"ram_weight_multiplier": "oops"}),
    )
    assert weigher.multiplier(make_host("h", aggregates=aggregates)) == 2.0


def test_override_changes_the_ranking_for_its_hosts(
    make_host: Host, make_aggregate, ranked
) -> None:
    neutral = make_aggregate({"ram_weight_multiplier": "0"})
    hosts = [
        make_host("most", memory_mb=32768),
        make_host("some", memory_mb=16384),
        make_host("least"),
    ]
    assert ranked(["RAMWeigher"], hosts) == ["most", "some", "least"]
    hosts[0].aggregates = (neutral,)
    assert ranked(["RAMWeigher"], hosts) == ["some", "least", "most"]


# --- load_weighers -------------------------------------------------------------------------


def test_registry_knows_every_weigher_by_class_name() -> None:
    registry = _registry()
    assert set(registry) == set(ALL_WEIGHERS)
    assert all(cls.__name__ == name for name, cls in registry.items())


def test_default_loads_all_weighers_in_settings_order(make_settings) -> None:
    config = make_settings()
    weighers = load_weighers(config)
    assert [type(w).__name__ for w in weighers] == list(ALL_WEIGHERS)
    assert all(w.settings is config for w in weighers)


def test_weight_classes_selects_and_orders(make_settings) -> None:
    config = make_settings(weight_classes=("IoOpsWeigher", "RAMWeigher"))
    assert [type(w).__name__ for w in load_weighers(config)] == ["IoOpsWeigher", "RAMWeigher"]
    assert load_weighers(make_settings(weight_classes=())) == []


def test_unknown_weigher_is_a_config_error_naming_it(make_settings) -> None:
    config = make_settings(weight_classes=("RAMWeigher", "NoSuchWeigher"))
    with pytest.raises(ConfigError, match="NoSuchWeigher") as info:
        load_weighers(config)
    assert "weight_classes" in str(info.value)


def test_every_weigher_option_is_a_setting(make_settings) -> None:
    fields = type(make_settings().filter_scheduler).model_fields
    for cls in _registry().values():
        if cls.__name__ == "MetricsWeigher":  # [metrics] weight_multiplier (its own test)
            continue
        assert cls.option in fields, cls.__name__
