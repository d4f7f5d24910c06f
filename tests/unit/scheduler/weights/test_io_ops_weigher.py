from __future__ import annotations

from collections.abc import Callable

from scheduler.host_state import HostState
from scheduler.weights.io_ops import IoOpsWeigher

Host = Callable[..., HostState]


def test_raw_value_is_num_io_ops(make_host: Host, make_spec, make_settings) -> None:
    weigher = IoOpsWeigher(make_settings())
    assert weigher.weigh(make_host("a", num_io_ops=3), make_spec()) == 3.0
    assert IoOpsWeigher.minval == 0 and IoOpsWeigher.maxval is None


def test_default_negative_multiplier_prefers_idle_hosts(
    make_host: Host, make_settings, ranked
) -> None:
    hosts = [make_host("busy", num_io_ops=5), make_host("idle"), make_host("light", num_io_ops=1)]
    assert make_settings().filter_scheduler.io_ops_weight_multiplier == -1.0
    assert ranked(["IoOpsWeigher"], hosts) == ["idle", "light", "busy"]


def test_positive_multiplier_prefers_busy_hosts(make_host: Host, make_settings, ranked) -> None:
    hosts = [make_host("busy", num_io_ops=5), make_host("idle"), make_host("light", num_io_ops=1)]
    config = make_settings(io_ops_weight_multiplier=1.0)
    assert ranked(["IoOpsWeigher"], hosts, config=config) == ["busy", "light", "idle"]
