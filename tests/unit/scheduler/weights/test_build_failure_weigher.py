from __future__ import annotations

from collections.abc import Callable

from novaq.settings import ALL_WEIGHERS
from scheduler.host_state import HostState
from scheduler.weights import load_weighers, weigh_hosts
from scheduler.weights.build_failure import BuildFailureWeigher

Host = Callable[..., HostState]


def test_raw_value_is_failed_builds_and_multiplier_is_negated(
    make_host: Host, make_spec, make_settings
) -> None:
    weigher = BuildFailureWeigher(make_settings())
    host = make_host("a", failed_builds=2)
    assert weigher.weigh(host, make_spec()) == 2.0
    assert weigher.multiplier(host) == -1_000_000.0
    assert BuildFailureWeigher.minval is None and BuildFailureWeigher.maxval is None


def test_more_failures_weigh_less(make_host: Host, ranked) -> None:
    hosts = [
        make_host("two", failed_builds=2),
        make_host("none"),
        make_host("one", failed_builds=1),
    ]
    assert ranked(["BuildFailureWeigher"], hosts) == ["none", "one", "two"]


def test_one_failure_outweighs_every_other_weigher(
    make_host: Host, make_spec, make_settings
) -> None:
    # "flaky" is better on every other count: more free RAM, CPU and disk, no I/O, the
    # soft-affinity group's member; "poor" is worse on all of them but never failed.
    flaky = make_host(
        "flaky", memory_mb=65536, vcpus_total=64, local_gb=2000, failed_builds=1, instances={"m1"}
    )
    poor = make_host("poor", memory_mb_used=7000, vcpus_used=7, local_gb_used=90, num_io_ops=7)
    request = make_spec(instance_group={"policy": "soft-affinity", "members": ["m1"]})
    weighers = load_weighers(make_settings())
    assert [type(w).__name__ for w in weighers] == list(ALL_WEIGHERS)
    flaky.failed_builds = 0
    assert [h.host for _, h in weigh_hosts(weighers, [flaky, poor], request)] == ["flaky", "poor"]
    flaky.failed_builds = 1
    weighed = weigh_hosts(weighers, [flaky, poor], request)
    assert [h.host for _, h in weighed] == ["poor", "flaky"]
    assert weighed[1][0] < -999_000


def test_aggregate_override_is_negated_too(
    make_host: Host, make_aggregate, ranked, make_settings
) -> None:
    silenced = make_aggregate({"build_failure_weight_multiplier": "0"})
    hosts = [
        make_host("flaky", failed_builds=3, aggregates=(silenced,), memory_mb=16384),
        make_host("ok"),
    ]
    weigher = BuildFailureWeigher(make_settings())
    assert weigher.multiplier(hosts[0]) == 0.0  # -0.0
    assert weigher.multiplier(hosts[1]) == -1_000_000.0
    assert ranked(["BuildFailureWeigher", "RAMWeigher"], hosts) == ["flaky", "ok"]
