from __future__ import annotations

from collections.abc import Callable

from scheduler.host_state import HostState
from scheduler.weights.disk import DiskWeigher

Host = Callable[..., HostState]


def test_raw_value_is_free_disk_mb(make_host: Host, make_spec, make_settings) -> None:
    weigher = DiskWeigher(make_settings())
    assert weigher.weigh(make_host("a", local_gb=100, local_gb_used=40), make_spec()) == 60 * 1024
    assert DiskWeigher.minval == 0 and DiskWeigher.maxval is None


def test_spreads_by_default_and_stacks_when_negative(
    make_host: Host, make_settings, ranked
) -> None:
    hosts = [
        make_host("used", local_gb_used=70),
        make_host("empty"),
        make_host("some", local_gb_used=10),
    ]
    assert ranked(["DiskWeigher"], hosts) == ["empty", "some", "used"]
    config = make_settings(disk_weight_multiplier=-1.0)
    assert ranked(["DiskWeigher"], hosts, config=config) == ["used", "some", "empty"]
