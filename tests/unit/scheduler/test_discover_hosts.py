"""Host discovery (``nova-manage cell_v2 discover_hosts`` and the scheduler's
``_discover_hosts_in_cells``) on SQLite: what is mapped, idempotence, concurrent runs and
the leader reported."""

from __future__ import annotations

import datetime as dt
import threading

from sqlalchemy import select

from compute.periodic import PeriodicContext, runs
from compute.periodic.schedule import BY_NAME, CLUSTER
from compute.resource_tracker import record_compute_node
from compute.servicegroup import COMPUTE, SCHEDULER, register_service
from compute.sessions import sessions_for
from models import ComputeNode, HostMapping, utcnow
from models.db import session_scope
from scheduler.discover_hosts import _map_host, discover_hosts, discover_hosts_in_cells
from tasks.periodic import run_periodic
from tests.factories import host_resources, make_compute_node, make_settings, set_last_seen_up


def _mappings(db_url: str) -> dict[str, str]:
    with session_scope(db_url) as session:
        return {m.host: m.cell_name for m in session.scalars(select(HostMapping))}


def _mapped_nodes(db_url: str) -> dict[str, int]:
    with session_scope(db_url) as session:
        return {n.hypervisor_hostname: n.mapped for n in session.scalars(select(ComputeNode))}


def _service(db_url: str, host: str, binary: str, **values: object) -> None:
    with session_scope(db_url) as session:
        service = register_service(session, host, binary, binary, make_settings())
        for name, value in values.items():
            setattr(service, name, value)


def test_unmapped_compute_hosts_are_mapped_to_cell1_with_their_nodes(db_url: str) -> None:
    for host in ("host2", "host1"):
        make_compute_node(db_url, host)
    _service(db_url, "host3", COMPUTE)  # a compute service whose node is not recorded yet

    assert discover_hosts(sessions_for(db_url)) == ["host1", "host2", "host3"]

    assert _mappings(db_url) == {"host1": "cell1", "host2": "cell1", "host3": "cell1"}
    assert _mapped_nodes(db_url) == {"host1": 1, "host2": 1}


def test_discovery_again_maps_nothing_new(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    assert discover_hosts(sessions_for(db_url)) == ["host1"]
    assert discover_hosts(sessions_for(db_url)) == []
    assert _mappings(db_url) == {"host1": "cell1"}


def test_schedulers_and_deleted_compute_services_are_not_mapped(db_url: str) -> None:
    _service(db_url, "sched1", SCHEDULER)
    _service(db_url, "gone", COMPUTE, deleted=1)
    assert discover_hosts(sessions_for(db_url)) == []
    assert _mappings(db_url) == {}


def test_a_node_added_later_to_a_mapped_host_is_marked_mapped(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    discover_hosts(sessions_for(db_url))
    with session_scope(db_url) as session:
        record_compute_node(session, "host1", host_resources(name="host1-b"), make_settings())
    assert _mapped_nodes(db_url) == {"host1": 1, "host1-b": 0}

    assert discover_hosts(sessions_for(db_url)) == []

    assert _mapped_nodes(db_url) == {"host1": 1, "host1-b": 1}


def test_a_host_mapped_by_a_concurrent_run_is_skipped_not_an_error(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    make_compute_node(db_url, "host2")
    discover_hosts(sessions_for(db_url))
    with session_scope(db_url) as session:
        # The insert a run that lost the race makes: refused by the unique host, and the
        # transaction goes on.
        assert _map_host(session, "host1") is False
        assert _map_host(session, "host3") is True
    assert _mappings(db_url) == {"host1": "cell1", "host2": "cell1", "host3": "cell1"}


def test_two_runs_at_once_map_each_host_exactly_once(db_url: str) -> None:
    hosts = [f"host{i}" for i in range(1, 9)]
    for host in hosts:
        make_compute_node(db_url, host)
    start = threading.Barrier(2)
    results: list[list[str]] = []

    def run() -> None:
        start.wait()
        results.append(discover_hosts(sessions_for(db_url)))

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert len(results) == 2
    assert sorted(results[0] + results[1]) == hosts  # each host reported by one run only
    assert sorted(_mappings(db_url)) == hosts


def test_the_periodic_pass_maps_and_reports_the_leader_and_who_acted(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    _service(db_url, "sched-c", SCHEDULER)
    _service(db_url, "sched-b", SCHEDULER)
    long_ago = utcnow() - dt.timedelta(hours=1)
    _service(db_url, "sched-a", SCHEDULER)
    set_last_seen_up(db_url, long_ago, "sched-a")  # alphabetically first, but down
    settings = make_settings(host="sched-c")
    ctx = PeriodicContext(sessions=sessions_for(db_url), settings=settings, host="cluster")

    result = discover_hosts_in_cells(ctx)

    assert result == {
        "mapped": ["host1"],
        "cell": "cell1",
        "leader": "sched-b",
        "acted_on": "sched-c",
    }
    assert discover_hosts_in_cells(ctx)["mapped"] == []


def test_the_leader_is_none_when_no_scheduler_is_up(db_url: str) -> None:
    ctx = PeriodicContext(sessions=sessions_for(db_url), settings=make_settings(), host="cluster")
    assert discover_hosts_in_cells(ctx)["leader"] is None


def test_the_periodic_pass_runs_once_for_the_cluster_through_the_wrapper(db_url: str) -> None:
    make_compute_node(db_url, "host1")

    result = run_periodic(BY_NAME["_discover_hosts_in_cells"], CLUSTER, "me")

    assert result["mapped"] == ["host1"] and result["acted_on"] == "host1"
    record = runs.last_runs(sessions_for(db_url))[("_discover_hosts_in_cells", CLUSTER)]
    assert record["last_status"] == "ok" and record["last_result"] == result
