from __future__ import annotations

import datetime as dt
import uuid as uuid_module

import pytest
from sqlalchemy import update

from compute.claims import consumer_allocations
from compute.instance_state import get_instance
from compute.sessions import sessions_for
from models import Service
from models.db import session_scope
from novaq.exceptions import ConfigError, NoValidHost
from scheduler.filters import load_filters
from scheduler.host_state import HostState
from scheduler.manager import Scheduler
from scheduler.weights import normalize
from tests.factories import (
    flavor_dict,
    make_compute_node,
    make_instance,
    make_settings,
    set_last_seen_up,
    spec_for,
)


def _host(name: str, **kw: object) -> HostState:
    values: dict[str, object] = dict(
        host=name,
        nodename=name,
        compute_node_id=1,
        vcpus_total=8,
        vcpus_used=0,
        memory_mb=8192,
        memory_mb_used=512,
        local_gb=100,
        local_gb_used=0,
        reserved_vcpus=0,
        reserved_memory_mb=512,
        reserved_disk_gb=0,
        cpu_allocation_ratio=4.0,
        ram_allocation_ratio=1.0,
        disk_allocation_ratio=1.0,
    )
    values.update(kw)
    return HostState(**values)  # type: ignore[arg-type]


def test_unknown_filter_name_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="unknown filter.*NoSuchFilter"):
        load_filters(make_settings(), ["ComputeFilter", "NoSuchFilter"])


def test_ram_filter_rejects_host_below_requested_memory() -> None:
    (ram,) = load_filters(make_settings(), ["RamFilter"])
    spec = spec_for(str(uuid_module.uuid4()), flavor_dict(memory_mb=4096))
    assert ram.host_passes(_host("a", memory_mb=8192, memory_mb_used=512 + 4000), spec) is False
    assert ram.host_passes(_host("b"), spec) is True


def test_core_filter_honours_the_cpu_allocation_ratio() -> None:
    (core,) = load_filters(make_settings(), ["CoreFilter"])
    spec = spec_for(str(uuid_module.uuid4()), flavor_dict(vcpus=4))
    assert core.host_passes(_host("a", vcpus_total=8, vcpus_used=28), spec) is True
    assert core.host_passes(_host("b", vcpus_total=8, vcpus_used=29), spec) is False


def test_compute_filter_rejects_disabled_and_down_hosts() -> None:
    (compute,) = load_filters(make_settings(), ["ComputeFilter"])
    spec = spec_for(str(uuid_module.uuid4()))
    assert compute.host_passes(_host("up"), spec)
    assert not compute.host_passes(_host("disabled", service_disabled=True), spec)
    assert not compute.host_passes(_host("down", service_up=False), spec)


def test_normalize_maps_to_unit_range_and_equal_values_to_zero() -> None:
    assert normalize([0, 5, 10], None, None) == [0.0, 0.5, 1.0]
    assert normalize([3, 3], None, None) == [0.0, 0.0]
    assert normalize([-10, 10], 0, None) == [0.0, 1.0]


def test_ram_weigher_spreads_to_the_host_with_most_free_ram(db_url: str) -> None:
    scheduler = Scheduler(make_settings())
    ranked = scheduler.rank(
        [_host("small", memory_mb=4096), _host("big", memory_mb=16384)], spec_for("x")
    )
    assert [h.host for h in ranked] == ["big", "small"]


def test_select_and_claim_places_the_instance_and_claims_it(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    uuid = make_instance(db_url)
    selection = Scheduler(make_settings()).select_and_claim(sessions_for(db_url), spec_for(uuid))
    assert selection.host == "host1"
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.host, instance.node) == ("host1", "host1")
        assert consumer_allocations(session, uuid) == {"VCPU": 1, "MEMORY_MB": 512, "DISK_GB": 1}


def test_redelivered_selection_returns_the_existing_placement(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    make_compute_node(db_url, "host2")
    uuid = make_instance(db_url)
    scheduler = Scheduler(make_settings())
    first = scheduler.select_and_claim(sessions_for(db_url), spec_for(uuid))
    second = scheduler.select_and_claim(sessions_for(db_url), spec_for(uuid))
    assert (second.host, second.compute_node_id) == (first.host, first.compute_node_id)
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid)["VCPU"] == 1


def test_no_valid_host_names_the_filter_that_removed_the_hosts(db_url: str) -> None:
    make_compute_node(db_url, "host1", memory_mb=2048)
    uuid = make_instance(db_url, flavor=flavor_dict(memory_mb=4096))
    with pytest.raises(
        NoValidHost, match=r"capacity pre-filter \(placement\): 0 enabled hosts with room"
    ):
        Scheduler(make_settings()).select_and_claim(
            sessions_for(db_url), spec_for(uuid, flavor_dict(memory_mb=4096))
        )


def test_down_host_is_never_picked(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    set_last_seen_up(db_url, dt.datetime(2000, 1, 1))
    uuid = make_instance(db_url)
    with pytest.raises(NoValidHost, match=r"ComputeFilter removed 1 host \(1 -> 0\)"):
        Scheduler(make_settings()).select_and_claim(sessions_for(db_url), spec_for(uuid))


def test_instance_deleted_while_scheduling_is_not_placed(db_url: str) -> None:
    node_id = make_compute_node(db_url, "host1")
    uuid = make_instance(db_url, task_state="deleting")
    assert Scheduler(make_settings()).select_and_claim(sessions_for(db_url), spec_for(uuid)) is None
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid) == {}
    assert node_id


def test_pci_passthrough_filter_needs_enough_free_devices() -> None:
    from compute.pci import PciRequest

    (pci,) = load_filters(make_settings(), ["PciPassthroughFilter"])
    request = PciRequest("gpu", 2, "10de", "13f1")
    spec = spec_for(str(uuid_module.uuid4()), pci_requests=(request,))
    key = ("10de", "13f1", "type-PCI")
    assert pci.host_passes(_host("two", pci_pools={key: 2}), spec)
    assert not pci.host_passes(_host("one", pci_pools={key: 1}), spec)
    assert pci.host_passes(_host("none"), spec_for("x"))


def test_multi_create_consumes_the_chosen_hosts_between_its_instances(db_url: str) -> None:
    # Each host has room for one 16 GB server; two instances must land on two hosts.
    for host in ("a", "b"):
        make_compute_node(db_url, host, memory_mb=16384 + 512)
    big = flavor_dict(memory_mb=16384)
    uuids = [make_instance(db_url, flavor=big) for _ in range(2)]
    selections = Scheduler(make_settings()).schedule(
        sessions_for(db_url), [spec_for(u, big) for u in uuids]
    )
    assert sorted(s.host for s in selections) == ["a", "b"]


def test_a_multi_create_that_cannot_place_all_places_none(db_url: str) -> None:
    make_compute_node(db_url, "a", memory_mb=16384 + 512)
    big = flavor_dict(memory_mb=16384)
    uuids = [make_instance(db_url, flavor=big) for _ in range(2)]
    with pytest.raises(NoValidHost):
        Scheduler(make_settings()).schedule(sessions_for(db_url), [spec_for(u, big) for u in uuids])
    with session_scope(db_url) as session:
        assert all(consumer_allocations(session, u) == {} for u in uuids)
        assert all(get_instance(session, u).host is None for u in uuids)


def test_alternates_never_include_a_host_chosen_for_the_request(db_url: str) -> None:
    for host in ("a", "b", "c", "d"):
        make_compute_node(db_url, host)
    uuids = [make_instance(db_url) for _ in range(2)]
    selections = Scheduler(make_settings()).schedule(
        sessions_for(db_url), [spec_for(u) for u in uuids]
    )
    chosen = {s.host for s in selections}
    for selection in selections:
        assert len(selection.alternates) == 2
        assert not chosen & {a[0] for a in selection.alternates}


def test_a_forced_host_bypasses_the_filters_and_gets_no_alternates(db_url: str) -> None:
    make_compute_node(db_url, "a")
    make_compute_node(db_url, "b")
    with session_scope(db_url) as session:
        session.execute(update(Service).where(Service.host == "b").values(disabled=True))
    uuid = make_instance(db_url)
    [selection] = Scheduler(make_settings()).schedule(
        sessions_for(db_url), [spec_for(uuid, force_hosts=("b",))]
    )
    assert (selection.host, selection.alternates) == ("b", ())


def test_hard_anti_affinity_is_checked_again_inside_the_claim(db_url: str) -> None:
    from models import ServerGroup, ServerGroupMember
    from scheduler.manager import check_group_policy
    from scheduler.request_spec import InstanceGroup

    make_compute_node(db_url, "a")
    first, second = make_instance(db_url, host="a", node="a"), make_instance(db_url)
    with session_scope(db_url) as session:
        session.add(
            ServerGroup(
                uuid="g1",
                name="g",
                policy="anti-affinity",
                rules={},
                members=[ServerGroupMember(instance_uuid=u) for u in (first, second)],
            )
        )
    group = InstanceGroup.load({"policy": "anti-affinity", "rules": {}, "members": [first, second]})
    with session_scope(db_url) as session, pytest.raises(Exception, match="anti-affinity"):
        check_group_policy(session, group, second, "a")


def test_every_instance_of_a_multi_create_stays_in_the_requested_zone(db_url: str) -> None:
    # Zone z holds one host with room for one server; the second instance has nowhere to go
    # in z. AvailabilityZoneFilter runs once per request in Nova (over candidates placement
    # already narrowed to the zone): here it must hold for every instance.
    from workflows import api

    for host in ("a", "b"):
        make_compute_node(db_url, host, memory_mb=16384 + 512)
    aggregate = api.create_aggregate("zone-z", availability_zone="z")
    api.add_host_to_aggregate(aggregate["id"], "a")
    big = flavor_dict(memory_mb=16384)
    uuids = [make_instance(db_url, flavor=big) for _ in range(2)]
    specs = [spec_for(u, big, availability_zone="z", num_instances=2) for u in uuids]
    with pytest.raises(NoValidHost):
        Scheduler(make_settings()).schedule(sessions_for(db_url), specs)


def test_what_the_last_claim_hands_over_is_what_schedule_returns(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``on_placed`` gets the request's selections in the claim that placed it (here the
    second host: the first refused once it was ranked), and ``schedule`` returns that
    same list: the chosen host with the other as its alternate, for each instance."""
    from novaq.exceptions import ResourcesUnavailable
    from scheduler import manager

    for host in ("a", "b"):
        make_compute_node(db_url, host)
    uuids = [make_instance(db_url) for _ in range(2)]
    scheduler = Scheduler(make_settings())
    real, refused = manager.claim, []

    def claim(session, node_id, uuid, request, **kw):  # type: ignore[no-untyped-def]
        if uuid == uuids[1] and not refused:  # the last instance's first choice is taken
            refused.append(node_id)
            raise ResourcesUnavailable(node=str(node_id), reason="taken meanwhile")
        return real(session, node_id, uuid, request, **kw)

    monkeypatch.setattr(manager, "claim", claim)
    handed: list[list[object]] = []
    selections = scheduler.schedule(
        sessions_for(db_url), [spec_for(u) for u in uuids], lambda _s, sel: handed.append(sel)
    )
    assert handed == [selections]
    assert [s.instance_uuid for s in selections] == uuids
    last = selections[1]
    with session_scope(db_url) as session:
        assert set(consumer_allocations(session, uuids[1])) == {"VCPU", "MEMORY_MB", "DISK_GB"}
    assert refused and last.compute_node_id != refused[0]
    assert all(a.host not in {s.host for s in selections} for s in selections for a in s.alternates)
