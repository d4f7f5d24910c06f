"""The no-valid-host fault names what decided (issue 15, defect 4): the filter that removed
the last hosts first, then the others that removed some, within the fault message's 255
characters; the whole per-filter list is kept in the fault's details."""

from __future__ import annotations

import pytest

from compute import instance_actions as actions
from models.db import session_scope
from novaq.exceptions import NoValidHost
from novaq.settings import Settings
from scheduler.host_state import HostState
from scheduler.manager import Scheduler
from scheduler.report import MESSAGE_LIMIT, FilterStep, no_valid_host
from tests.factories import make_instance
from tests.unit.scheduler.filters.conftest import build_host, build_spec

#: Every filter novaq has, anti-affinity last so that it decides after many others.
FILTERS = (
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "AvailabilityZoneFilter",
    "AggregateInstanceExtraSpecsFilter",
    "SameHostFilter",
    "DifferentHostFilter",
    "IsolatedHostsFilter",
    "NumInstancesFilter",
    "IoOpsFilter",
    "CoreFilter",
    "RamFilter",
    "DiskFilter",
    "PciPassthroughFilter",
    "ServerGroupAffinityFilter",
    "ServerGroupAntiAffinityFilter",
)
PREFILTER = (
    "capacity pre-filter (placement): 9 enabled hosts with room for "
    "VCPU=1, MEMORY_MB=512, DISK_GB=1"
)


def _hosts() -> list[HostState]:
    """Nine hosts, each but the last three removed by a filter of its own; the last
    three hold a member of the anti-affinity group."""
    return [
        build_host("h-disabled", service_disabled=True),
        build_host("h-crowded", num_instances=50),
        build_host("h-busy", num_io_ops=8),
        build_host("h-no-cpu", vcpus_used=32),
        build_host("h-no-ram", memory_mb_used=8192),
        build_host("h-no-disk", local_gb_used=100),
        *(build_host(f"h-member-{i}", instances={"m1"}) for i in range(3)),
    ]


def _raised() -> NoValidHost:
    scheduler = Scheduler(Settings(filter_scheduler={"enabled_filters": FILTERS}))
    spec = build_spec(instance_group={"policy": "anti-affinity", "members": ["m1"]})
    with pytest.raises(NoValidHost) as raised:
        scheduler.rank(_hosts(), spec, prefilter=PREFILTER)
    return raised.value


def test_the_message_names_the_deciding_filter_first_within_255_characters() -> None:
    exc = _raised()
    message = str(exc)
    assert message.startswith(
        "No valid host was found. ServerGroupAntiAffinityFilter removed 3 hosts (3 -> 0); "
        "ComputeFilter removed 1 host (9 -> 8); "
    ), message
    assert len(message) <= MESSAGE_LIMIT
    # Whole, it would not have fit: the rest is counted and pointed to.
    every = [f"{name} removed 1 host" for name in ("NumInstancesFilter", "IoOpsFilter")]
    assert len("; ".join([message, *every, PREFILTER])) > MESSAGE_LIMIT
    assert message.endswith("more in the fault's details."), message
    # Filters that removed nothing are not in the message.
    assert "ComputeCapabilitiesFilter" not in message


def test_the_whole_per_filter_list_is_kept_in_the_fault_details(db_url: str) -> None:
    exc = _raised()
    uuid = make_instance(db_url)
    with session_scope(db_url) as session:
        fault = actions.add_fault(session, uuid, exc, None)
        session.flush()
        message, details = fault.message, fault.details or ""
    assert message == str(exc)
    listed = details.split("\n\n")[0].splitlines()
    assert listed[:2] == ["ComputeFilter: 9 -> 8", "ComputeCapabilitiesFilter: 8 -> 8"]
    assert listed[-2:] == ["ServerGroupAntiAffinityFilter: 3 -> 0", PREFILTER]
    assert [line.split(":")[0] for line in listed[:-1]] == list(FILTERS)
    assert "Traceback" in details  # a 500's traceback follows, as Nova keeps it


def test_a_short_report_is_given_whole() -> None:
    steps = [FilterStep("ignored hosts (host1)", 1, 0), FilterStep("ComputeFilter", 0, 0)]
    exc = no_valid_host(steps, [PREFILTER.replace("9 enabled", "1 enabled")])
    assert str(exc) == (
        "No valid host was found. ignored hosts (host1) removed 1 host (1 -> 0); "
        "capacity pre-filter (placement): 1 enabled hosts with room for VCPU=1, MEMORY_MB=512, "
        "DISK_GB=1."
    )
    assert exc.kwargs["fault_details"].splitlines()[:2] == [
        "ignored hosts (host1): 1 -> 0",
        "ComputeFilter: 0 -> 0",
    ]


def test_one_part_too_long_alone_is_cut_and_kept_whole_in_the_details() -> None:
    long_host = "h" * 300
    exc = no_valid_host([FilterStep(f"requested host {long_host}", 1, 0)])
    assert len(str(exc)) <= MESSAGE_LIMIT
    assert long_host in exc.kwargs["fault_details"]


def test_a_requested_host_the_filters_removed_is_named() -> None:
    scheduler = Scheduler(Settings())
    spec = build_spec(requested_host="host2")
    hosts = [build_host("host2", service_up=False)]
    with pytest.raises(NoValidHost) as raised:
        scheduler.rank(hosts, spec)
    assert str(raised.value) == (
        "No valid host was found. ComputeFilter removed 1 host (1 -> 0); requested host host2."
    )


def test_hosts_lost_to_other_claims_are_all_in_the_fault_details(db_url: str) -> None:
    from compute.claims import FirstFit

    lost = tuple(f"host-{i:02d}: Insufficient compute resources: VCPU" for i in range(20))
    exc = FirstFit(None, -1, lost).no_valid_host()
    uuid = make_instance(db_url)
    with session_scope(db_url) as session:
        fault = actions.add_fault(session, uuid, exc, None)
        session.flush()
        message, details = fault.message, fault.details or ""
    assert len(message) == MESSAGE_LIMIT  # cut, as Nova's column
    assert details.split("\n\n")[0].splitlines() == list(lost)
