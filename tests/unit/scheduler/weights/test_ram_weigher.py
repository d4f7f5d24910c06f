from __future__ import annotations

from collections.abc import Callable

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec
from scheduler.weights import weigh_hosts
from scheduler.weights.ram import RAMWeigher

Host = Callable[..., HostState]


def test_raw_value_is_free_ram_mb(
    make_host: Host, make_spec: Callable[..., RequestSpec], make_settings
) -> None:
    weigher = RAMWeigher(make_settings())
    assert weigher.weigh(make_host("a", memory_mb=8192, memory_mb_used=1024), make_spec()) == 7168
    assert RAMWeigher.minval == 0 and RAMWeigher.maxval is None


def test_spreads_to_the_host_with_most_free_ram(make_host: Host, ranked) -> None:
    hosts = [
        make_host("half", memory_mb_used=4096),
        make_host("empty"),
        make_host("full", memory_mb_used=8000),
    ]
    assert ranked(["RAMWeigher"], hosts) == ["empty", "half", "full"]


def test_negative_multiplier_stacks(make_host: Host, make_settings, ranked) -> None:
    hosts = [
        make_host("half", memory_mb_used=4096),
        make_host("empty"),
        make_host("full", memory_mb_used=8000),
    ]
    config = make_settings(ram_weight_multiplier=-1.0)
    assert ranked(["RAMWeigher"], hosts, config=config) == ["full", "half", "empty"]


def test_overcommitted_host_is_clamped_at_zero(make_host: Host, make_spec, make_settings) -> None:
    over = make_host("over", memory_mb_used=12288)  # -4096 MB free
    zero = make_host("zero", memory_mb_used=8192)
    empty = make_host("empty")
    weighed = {
        h.host: w
        for w, h in weigh_hosts([RAMWeigher(make_settings())], [over, zero, empty], make_spec())
    }
    assert weighed == {"empty": 1.0, "zero": 0.0, "over": 0.0}
