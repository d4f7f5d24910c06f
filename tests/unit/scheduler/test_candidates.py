"""The candidate load (``scheduler.candidates``) and the cost of a decision in statements:
what the database computes for each host matches what Python would, and a decision
issues the same number of statements at 10 hosts as at 200."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import insert, update

from compute.claims import ResourceRequest
from compute.pci import sync_devices
from compute.resource_tracker import record_compute_node
from compute.servicegroup import COMPUTE, is_up, register_service
from compute.sessions import sessions_for
from models import ComputeNode, Instance, Service, utcnow
from models.db import session_scope
from scheduler.candidates import load_candidates
from scheduler.manager import Scheduler
from scheduler.request_spec import InstanceGroup
from tests.factories import (
    flavor_dict,
    gpu_settings,
    gpus,
    host_resources,
    make_compute_node,
    make_instance,
    make_settings,
    set_last_seen_up,
    spec_for,
    statements_run,
)


def _add_hosts(db_url: str, first: int, count: int) -> None:
    """``count`` up, enabled hosts of 16 vCPUs, 32 GB and 500 GB, in two statements."""
    now = utcnow()
    names = [f"bulk{i:04d}" for i in range(first, first + count)]
    with session_scope(db_url) as session:
        session.execute(
            insert(Service),
            [dict(host=n, binary=COMPUTE, topic=f"compute.{n}", created_at=now) for n in names],
        )
        session.execute(
            insert(ComputeNode),
            [
                dict(
                    uuid=f"00000000-0000-4000-8000-{i:012d}",
                    host=n,
                    hypervisor_hostname=n,
                    hypervisor_type="QEMU",
                    cpu_info='{"arch": "x86_64"}',
                    vcpus=16,
                    memory_mb=32768,
                    local_gb=500,
                    memory_mb_used=512,
                    created_at=now,
                )
                for i, n in enumerate(names, start=first)
            ],
        )


def _decision_statements(db_url: str, scheduler: Scheduler) -> list[str]:
    uuid = make_instance(db_url)
    with statements_run(db_url) as statements:
        assert scheduler.select_and_claim(sessions_for(db_url), spec_for(uuid)) is not None
    return statements


def test_a_decision_issues_as_many_statements_at_200_hosts_as_at_10(db_url: str) -> None:
    scheduler = Scheduler(gpu_settings())
    _add_hosts(db_url, 0, 10)
    at_10 = _decision_statements(db_url, scheduler)
    _add_hosts(db_url, 10, 190)
    at_200 = _decision_statements(db_url, scheduler)
    assert len(at_200) == len(at_10)
    # One read of the candidates with the instance's placement, then the claim (its
    # read, INSERT and compare-and-swap) and the instance's host; nothing per host (no
    # aggregates, PCI pools or instance uuids: none has hosts, or free devices, and none
    # are needed). (SQLite's reader is query_only from its connect: no pragma here.)
    kinds = ["SELECT", "SELECT", "INSERT", "UPDATE", "UPDATE"]
    assert [s.split()[0] for s in at_10] == kinds


def test_aggregates_are_read_only_when_one_has_hosts(db_url: str) -> None:
    from workflows import api

    settings = gpu_settings()
    _add_hosts(db_url, 0, 3)
    request = ResourceRequest(1, 512, 1)
    aggregate = api.create_aggregate("zone-z", availability_zone="z")
    with session_scope(db_url) as session, statements_run(db_url) as without:
        hosts = load_candidates(session, settings, request).hosts
    assert [(h.aggregates, h.availability_zone) for h in hosts] == [((), "nova")] * 3
    api.add_host_to_aggregate(aggregate["id"], hosts[0].host)
    with session_scope(db_url) as session, statements_run(db_url) as with_one:
        hosts = load_candidates(session, settings, request).hosts
    assert [h.availability_zone for h in hosts] == ["z", "nova", "nova"]
    assert [a.name for a in hosts[0].aggregates] == ["zone-z"]
    assert len(with_one) == len(without) + 1 and "aggregate_hosts" in with_one[-2]


def test_pci_pools_are_read_only_when_a_candidate_has_free_devices(db_url: str) -> None:
    settings = gpu_settings()
    _add_hosts(db_url, 0, 5)
    request = ResourceRequest(1, 512, 1)
    with session_scope(db_url) as session, statements_run(db_url) as without:
        assert all(not h.pci_pools for h in load_candidates(session, settings, request).hosts)
    with session_scope(db_url) as session:
        resources = host_resources(name="gpu-host", pci_devices=gpus("0000:81:00.0"))
        register_service(session, "gpu-host", COMPUTE, "compute.gpu-host", settings)
        node = record_compute_node(session, "gpu-host", resources, settings)
        sync_devices(session, node.id, resources.pci_devices, settings)
    with session_scope(db_url) as session, statements_run(db_url) as with_gpu:
        hosts = {h.host: h for h in load_candidates(session, settings, request).hosts}
    assert hosts["gpu-host"].pci_pools == {("10de", "13f1", "type-PCI"): 1}
    assert len(with_gpu) == len(without) + 1
    # A request without PCI devices: no pools read, only how many are free (PCIWeigher's).
    with session_scope(db_url) as session, statements_run(db_url) as counted:
        found = load_candidates(session, settings, request, with_pci_pools=False).hosts
    hosts = {h.host: h for h in found}
    assert hosts["gpu-host"].pci_pools == {} and hosts["gpu-host"].free_pci_devices == 1
    assert {h.free_pci_devices for h in found if h.host != "gpu-host"} == {0}
    assert len(counted) == len(without)


def test_service_up_is_what_the_servicegroup_says(db_url: str) -> None:
    settings = gpu_settings()
    now = utcnow()
    down = dt.timedelta(seconds=settings.effective_service_down_time)
    heartbeats = {
        "fresh": now,
        "just-up": now - down + dt.timedelta(seconds=5),
        "stale": now - down - dt.timedelta(seconds=5),
        "future": now + down + dt.timedelta(seconds=5),
        "never": None,
    }
    for host in [*heartbeats, "forced-down"]:
        make_compute_node(db_url, host, settings=settings)
    for host, last in heartbeats.items():
        set_last_seen_up(db_url, last, host)
    with session_scope(db_url) as session:
        session.execute(
            update(Service).where(Service.host == "forced-down").values(forced_down=True)
        )
    with session_scope(db_url) as session:
        states = {h.host: h.service_up for h in load_candidates(session, settings).hosts}
        services = {s.host: is_up(s, settings) for s in session.query(Service)}
    assert states == services
    assert states == {
        "fresh": True,
        "just-up": True,
        "stale": False,
        "future": False,
        "never": True,  # created just now: its creation counts as the heartbeat
        "forced-down": False,
    }


def test_instance_uuids_are_read_only_for_a_request_that_needs_them(db_url: str) -> None:
    settings = gpu_settings()
    make_compute_node(db_url, "host1", settings=settings)
    on_host = make_instance(db_url)
    with session_scope(db_url) as session:
        session.execute(update(Instance).values(host="host1", node="host1"))
    scheduler = Scheduler(settings)
    plain = spec_for("new")
    anti = spec_for("new", instance_group=InstanceGroup(policy="anti-affinity", members=("x",)))
    assert not scheduler.needs_instances([plain])
    assert scheduler.needs_instances([anti])
    same_host = spec_for("new", hints={"same_host": on_host})
    assert not scheduler.needs_instances([same_host])  # SameHostFilter is not enabled
    filters = (*settings.filter_scheduler.enabled_filters, "SameHostFilter")
    with_same_host = gpu_settings(filter_scheduler={"enabled_filters": filters})
    assert Scheduler(with_same_host).needs_instances([same_host])
    with session_scope(db_url) as session:
        full = load_candidates(session, settings).hosts[0]
        bare = load_candidates(session, settings, with_instances=False).hosts[0]
    assert full.instances == {on_host} and bare.instances == set()
    # The counts are there either way (IoOpsWeigher, NumInstancesFilter, IoOpsFilter).
    assert (full.num_instances, full.num_io_ops) == (bare.num_instances, bare.num_io_ops) == (1, 1)


def test_a_flavor_without_disk_lands_on_a_host_whose_disk_is_overcommitted(db_url: str) -> None:
    # Nova leaves DISK_GB out of a root_gb=0 request: neither the SQL pre-filter, nor
    # DiskFilter, nor the claim checks disk, and the host takes the server.
    node_id = make_compute_node(db_url, "full-disk", vcpus=8, memory_mb=8192, local_gb=100)
    with session_scope(db_url) as session:
        session.execute(
            update(ComputeNode).where(ComputeNode.id == node_id).values(local_gb_used=130)
        )
    scheduler = Scheduler(make_settings())
    no_disk = flavor_dict(root_gb=0)
    uuid = make_instance(db_url, no_disk)
    with session_scope(db_url) as session:
        hosts = load_candidates(session, make_settings(), ResourceRequest(1, 512, 0)).hosts
        assert [h.host for h in hosts] == ["full-disk"]
        assert load_candidates(session, make_settings(), ResourceRequest(1, 512, 1)).hosts == []
    placed = scheduler.select_and_claim(sessions_for(db_url), spec_for(uuid, no_disk))
    assert placed is not None
