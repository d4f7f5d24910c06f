from __future__ import annotations

from collections.abc import Callable

from scheduler.host_state import HostState
from scheduler.weights import weigh_hosts
from scheduler.weights.cpu import CPUWeigher

Host = Callable[..., HostState]


def test_raw_value_is_vcpus_times_ratio_minus_used(
    make_host: Host, make_spec, make_settings
) -> None:
    weigher = CPUWeigher(make_settings())
    host = make_host("a", vcpus_total=8, cpu_allocation_ratio=16.0, vcpus_used=10)
    assert weigher.weigh(host, make_spec()) == 118.0
    assert CPUWeigher.minval == 0 and CPUWeigher.maxval is None


def test_spreads_by_default_and_stacks_when_negative(
    make_host: Host, make_settings, ranked
) -> None:
    hosts = [
        make_host("busy", vcpus_used=6),
        make_host("idle"),
        make_host("big", vcpus_total=4, cpu_allocation_ratio=4.0, vcpus_used=2),  # 14 free
    ]
    assert ranked(["CPUWeigher"], hosts) == ["big", "idle", "busy"]
    config = make_settings(cpu_weight_multiplier=-2.0)
    assert ranked(["CPUWeigher"], hosts, config=config) == ["busy", "idle", "big"]


def test_overcommitted_host_counts_as_no_free_vcpus(
    make_host: Host, make_spec, make_settings
) -> None:
    hosts = [make_host("over", vcpus_used=12), make_host("full", vcpus_used=8), make_host("idle")]
    weighed = {h.host: w for w, h in weigh_hosts([CPUWeigher(make_settings())], hosts, make_spec())}
    assert weighed == {"idle": 1.0, "full": 0.0, "over": 0.0}
