"""The resource tracker's stats in the host states (``compute.stats`` counted by
``scheduler.candidates`` in one grouped query), read by ComputeCapabilitiesFilter's
``capabilities:stats:...`` keys, and counted only for a request whose filters read them
(``Scheduler.needs_stats``): a decision that does not costs no statement more."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from compute.sessions import sessions_for
from models import Instance
from models.db import session_scope
from scheduler.candidates import load_candidates
from scheduler.filters import load_filters
from scheduler.host_state import HostState
from scheduler.manager import Scheduler
from tests.factories import (
    flavor_dict,
    make_compute_node,
    make_instance,
    make_settings,
    spec_for,
    statements_run,
)


def _instance(db_url: str, host: str | None, **values: Any) -> str:
    uuid = make_instance(db_url)
    values = {"host": host, "node": host, "vm_state": "active", "task_state": None, **values}
    with session_scope(db_url) as session:
        session.execute(update(Instance).where(Instance.uuid == uuid).values(**values))
    return uuid


def _hosts(session: Session) -> dict[str, HostState]:
    return {h.host: h for h in load_candidates(session, make_settings(), with_stats=True).hosts}


def _counts_stats(statement: str) -> bool:
    return "GROUP BY instances.host" in statement


@pytest.fixture
def two_hosts(db_url: str) -> str:
    for host in ("host1", "host2"):
        make_compute_node(db_url, host, vcpus=16, memory_mb=32768, local_gb=500)
    _instance(db_url, "host1", project_id="p1", os_type="linux")
    _instance(db_url, "host1", project_id="p1", os_type="linux")
    _instance(db_url, "host1", vm_state="building", task_state="spawning", project_id="p2")
    _instance(db_url, "host1", project_id="p3", deleted=1)  # deleted: not counted
    _instance(db_url, None, vm_state="shelved_offloaded", project_id="p1")  # on no host
    _instance(db_url, "host2", task_state="rescuing", project_id="p2", os_type="windows")
    return db_url


def test_the_stats_count_each_host_s_live_instances(two_hosts: str) -> None:
    with session_scope(two_hosts) as session, statements_run(two_hosts) as bare:
        plain = {h.host: h for h in load_candidates(session, make_settings()).hosts}
    with session_scope(two_hosts) as session, statements_run(two_hosts) as counted:
        hosts = {
            h.host: h for h in load_candidates(session, make_settings(), with_stats=True).hosts
        }
    assert hosts["host1"].stats == {
        "failed_builds": 0,
        "num_instances": 3,
        "num_vm_active": 2,
        "num_vm_building": 1,
        "num_task_None": 2,
        "num_task_spawning": 1,
        "num_os_type_linux": 2,
        "num_os_type_None": 1,
        "num_proj_p1": 2,
        "num_proj_p2": 1,
        "io_workload": 1,
    }
    assert hosts["host2"].stats["num_task_rescuing"] == hosts["host2"].stats["io_workload"]
    # The counts the candidates query gives agree with them.
    for state in hosts.values():
        assert state.num_instances == state.stats["num_instances"]
        assert state.num_io_ops == state.stats["io_workload"]
    assert {h.host: h.stats for h in plain.values()} == {
        "host1": {"failed_builds": 0},
        "host2": {"failed_builds": 0},
    }
    assert len(counted) == len(bare) + 1 and _counts_stats(counted[-1])


@pytest.mark.parametrize(
    ("extra_specs", "reads"),
    [
        ({}, False),
        ({"hw:cpu_policy": "dedicated", "capabilities:hypervisor_type": "QEMU"}, False),
        ({"capabilities:num_instances": "<= 3", "num_io_ops": "0"}, False),  # attributes
        ({"capabilities:stats:failed_builds": "0"}, False),  # always there
        ({"capabilities:stats:num_vm_active": ">= 1"}, True),
        ({"capabilities:stats:io_workload": "0"}, True),
        ({"capabilities:num_proj_p1": ">= 1"}, True),  # not an attribute: Nova reads stats
        ({"num_os_type_linux": "1"}, True),  # unscoped, as Nova reads it
        ({"other:num_vm_active": "1"}, False),  # another scope: ignored
    ],
)
def test_only_a_request_naming_an_instance_stat_has_them_counted(
    extra_specs: dict[str, str], reads: bool
) -> None:
    scheduler = Scheduler(make_settings())
    spec = spec_for("u", flavor_dict(extra_specs=extra_specs))
    assert scheduler.needs_stats([spec]) is reads
    without = make_settings(filter_scheduler={"enabled_filters": ["ComputeFilter"]})
    assert Scheduler(without).needs_stats([spec]) is False


def test_a_decision_on_a_project_s_count_lands_where_the_project_is(two_hosts: str) -> None:
    uuid = make_instance(two_hosts)
    wants_p2_alone = flavor_dict(
        extra_specs={"capabilities:stats:num_proj_p2": "1", "capabilities:stats:num_vm_active": "1"}
    )
    with statements_run(two_hosts) as statements:
        placed = Scheduler(make_settings()).select_and_claim(
            sessions_for(two_hosts), spec_for(uuid, wants_p2_alone)
        )
    assert placed is not None and placed.host == "host2"
    assert sum(_counts_stats(s) for s in statements) == 1
    uuid = make_instance(two_hosts)
    with statements_run(two_hosts) as statements:
        assert Scheduler(make_settings()).select_and_claim(sessions_for(two_hosts), spec_for(uuid))
    assert not any(_counts_stats(s) for s in statements)


def test_an_instance_building_in_an_io_task_counts_twice_as_in_nova(two_hosts: str) -> None:
    # Nova's io_workload sums its counters (num_vm_building + num_task_resize_migrating).
    _instance(two_hosts, "host2", vm_state="building", task_state="resize_migrating")
    for with_stats in (False, True):
        with session_scope(two_hosts) as session:
            found = load_candidates(session, make_settings(), with_stats=with_stats).hosts
        host2 = next(h for h in found if h.host == "host2")
        assert host2.num_io_ops == 3  # rescuing 1, building and migrating 2
        if with_stats:
            assert host2.stats["io_workload"] == 3


def test_compute_capabilities_filter_reads_the_counted_stats(two_hosts: str) -> None:
    (flt,) = load_filters(make_settings(), ["ComputeCapabilitiesFilter"])
    with session_scope(two_hosts) as session:
        hosts = {
            h.host: h for h in load_candidates(session, make_settings(), with_stats=True).hosts
        }
    cases = {
        "capabilities:stats:num_instances": (">= 2", True, False),
        "capabilities:stats:num_os_type_windows": ("1", False, True),  # none on host1
        "num_vm_building": ("1", True, True),  # unscoped, absent on host2: ignored there
        "capabilities:total_usable_ram_mb": ("32768", True, True),
    }
    for key, (wanted, on_host1, on_host2) in cases.items():
        spec = spec_for("u", flavor_dict(extra_specs={key: wanted}))
        assert flt.host_passes(hosts["host1"], spec) is on_host1, key
        assert flt.host_passes(hosts["host2"], spec) is on_host2, key
