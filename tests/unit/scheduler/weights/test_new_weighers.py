"""The weighers Nova 34 has besides the resource ones: CrossCellWeigher,
HypervisorVersionWeigher, NumInstancesWeigher (raw values, defaults, aggregate overrides)."""

from __future__ import annotations

from collections.abc import Callable

from scheduler.host_state import HostState
from scheduler.weights import weigh_hosts
from scheduler.weights.cross_cell import CrossCellWeigher
from scheduler.weights.hypervisor_version import HypervisorVersionWeigher
from scheduler.weights.num_instances import NumInstancesWeigher

Host = Callable[..., HostState]


def test_nova_s_default_multipliers(make_settings) -> None:
    options = make_settings().filter_scheduler
    assert options.cross_cell_move_weight_multiplier == 1000000.0
    assert options.hypervisor_version_weight_multiplier == 1.0
    assert options.num_instances_weight_multiplier == 0.0
    assert options.image_props_weight_multiplier == 0.0
    assert options.image_props_weight_setting == ()


def test_hypervisor_version_is_the_raw_value_and_newer_wins(
    make_host: Host, make_spec, make_settings, ranked
) -> None:
    weigher = HypervisorVersionWeigher(make_settings())
    assert weigher.weigh(make_host("a", hypervisor_version=8_002_000), make_spec()) == 8002000.0
    assert weigher.weigh(make_host("unknown"), make_spec()) == 0.0
    hosts = [
        make_host("old", hypervisor_version=6_002_000),
        make_host("new", hypervisor_version=9_000_000),
    ]
    assert ranked(["HypervisorVersionWeigher"], hosts) == ["new", "old"]
    older = make_settings(hypervisor_version_weight_multiplier=-1.0)
    assert ranked(["HypervisorVersionWeigher"], hosts, config=older) == ["old", "new"]


def test_num_instances_is_off_by_default_and_spreads_or_packs(
    make_host: Host, make_spec, make_settings, ranked
) -> None:
    hosts = [make_host("busy", num_instances=5), make_host("idle")]
    assert NumInstancesWeigher(make_settings()).weigh(hosts[0], make_spec()) == 5.0
    assert ranked(["NumInstancesWeigher"], hosts) == ["busy", "idle"]  # all 0: kept in order
    spread = make_settings(num_instances_weight_multiplier=-1.0)
    assert ranked(["NumInstancesWeigher"], hosts, config=spread) == ["idle", "busy"]
    reordered = list(reversed(hosts))
    pack = make_settings(num_instances_weight_multiplier=2.0)
    assert ranked(["NumInstancesWeigher"], reordered, config=pack) == ["busy", "idle"]


def test_an_aggregate_overrides_the_multiplier(
    make_host: Host, make_aggregate, make_settings, ranked
) -> None:
    spread_here = make_aggregate({"num_instances_weight_multiplier": "-10"}, hosts=["busy"])
    hosts = [make_host("idle"), make_host("busy", num_instances=5, aggregates=(spread_here,))]
    pack = make_settings(num_instances_weight_multiplier=1.0)
    # busy: -10 * 1.0; idle: 1.0 * 0.0.
    assert ranked(["NumInstancesWeigher"], hosts, config=pack) == ["idle", "busy"]


def test_cross_cell_weighs_nothing_unless_a_move_may_leave_its_cell(
    make_host: Host, make_spec, make_settings
) -> None:
    weigher = CrossCellWeigher(make_settings())
    hosts = [make_host("here"), make_host("there", cell="cell2")]
    assert weigher.weigh_all(hosts, make_spec()) == [0.0, 0.0]
    same_cell_only = make_spec(requested_cell="cell1")
    assert weigher.weigh_all(hosts, same_cell_only) == [0.0, 0.0]
    cross = make_spec(requested_cell="cell1", allow_cross_cell_move=True)
    assert weigher.weigh_all(hosts, cross) == [1.0, -1.0]


def test_cross_cell_prefers_the_source_cell_over_everything_else(
    make_host: Host, make_spec, ranked
) -> None:
    hosts = [make_host("roomy", memory_mb=65536, cell="cell2"), make_host("home")]
    cross = make_spec(requested_cell="cell1", allow_cross_cell_move=True)
    assert ranked(["RAMWeigher", "CrossCellWeigher"], hosts, cross) == ["home", "roomy"]
    assert ranked(["RAMWeigher", "CrossCellWeigher"], hosts) == ["roomy", "home"]


def test_a_request_spec_carries_the_cell_fields_through_its_dict(make_spec) -> None:
    cross = make_spec(requested_cell="cell1", allow_cross_cell_move=True)
    back = type(cross).from_dict(cross.to_dict())
    assert (back.requested_cell, back.allow_cross_cell_move) == ("cell1", True)


def test_a_weigher_whose_multiplier_is_0_everywhere_is_not_asked(
    make_host: Host, make_spec, make_settings, make_aggregate
) -> None:
    class Counting(NumInstancesWeigher):
        asked = 0

        def weigh_all(self, hosts, spec):  # type: ignore[no-untyped-def]
            Counting.asked += 1
            return super().weigh_all(hosts, spec)

    hosts = [make_host("a", num_instances=2), make_host("b")]
    assert [h.host for _, h in weigh_hosts([Counting(make_settings())], hosts, make_spec())] == [
        "a",
        "b",
    ]
    assert Counting.asked == 0
    on_here = make_aggregate({"num_instances_weight_multiplier": "-1"}, hosts=["a"])
    hosts[0].aggregates = (on_here,)
    ranked = [h.host for _, h in weigh_hosts([Counting(make_settings())], hosts, make_spec())]
    assert Counting.asked == 1 and ranked == ["b", "a"]
