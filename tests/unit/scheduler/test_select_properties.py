"""Properties of selection, whatever the hosts and the request (hypothesis)."""

from __future__ import annotations

import uuid as uuid_module

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute.claims import allocation_usage, node_capacity
from compute.sessions import sessions_for
from models import ComputeNode, ServerGroup, ServerGroupMember
from models.db import session_scope
from novaq.exceptions import NoValidHost
from scheduler.candidates import load_host_states
from scheduler.filters import load_filters
from scheduler.manager import Scheduler
from tests.factories import (
    flavor_dict,
    make_compute_node,
    make_instance,
    make_settings,
    reset_database,
    spec_for,
)

hosts_strategy = st.lists(
    st.fixed_dictionaries(
        {
            "vcpus": st.integers(1, 16),
            "memory_mb": st.integers(1024, 16384),
            "local_gb": st.integers(10, 200),
        }
    ),
    min_size=1,
    max_size=5,
)
request_strategy = st.fixed_dictionaries(
    {
        "vcpus": st.integers(1, 8),
        "memory_mb": st.integers(128, 8192),
        "root_gb": st.integers(0, 80),
        "count": st.integers(1, 4),
        "policy": st.sampled_from([None, "anti-affinity", "affinity", "soft-anti-affinity"]),
    }
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hosts=hosts_strategy, request=request_strategy, ratio=st.sampled_from([1.0, 1.5, 4.0]))
def test_a_selection_passes_every_filter_and_never_overcommits(
    db_url: str, hosts: list[dict[str, int]], request: dict[str, object], ratio: float
) -> None:
    reset_database(db_url)
    conf = make_settings(cpu_allocation_ratio=ratio, ram_allocation_ratio=ratio)
    for index, sizes in enumerate(hosts):
        make_compute_node(db_url, f"h{index}", settings=conf, **sizes)
    flavor = flavor_dict(request["vcpus"], request["memory_mb"], request["root_gb"])  # type: ignore[arg-type]
    uuids = [make_instance(db_url, flavor=flavor) for _ in range(request["count"])]  # type: ignore[call-overload]
    group = None
    if request["policy"]:
        group = str(uuid_module.uuid4())
        with session_scope(db_url) as session:
            session.add(
                ServerGroup(
                    uuid=group,
                    name="g",
                    policy=request["policy"],
                    rules={},
                    members=[ServerGroupMember(instance_uuid=u) for u in uuids],
                )
            )
    specs = [spec_for(u, flavor, group=group, num_instances=len(uuids)) for u in uuids]
    with session_scope(db_url) as session:
        before = {h.host: h for h in load_host_states(session, conf)}
    scheduler = Scheduler(conf)
    try:
        selections = scheduler.schedule(sessions_for(db_url), specs)
    except NoValidHost:
        with session_scope(db_url) as session:
            for node in session.query(ComputeNode):
                assert all(v == 0 for v in allocation_usage(session, node.id).values())
        return
    assert len(selections) == len(uuids)
    first_filters = load_filters(conf, conf.filter_scheduler.enabled_filters)
    for selection, spec in zip(selections, specs, strict=True):
        state = before[selection.host]
        assert all(
            f.host_passes(state, spec)
            for f in first_filters
            if type(f).__name__
            not in {
                "CoreFilter",
                "RamFilter",
                "DiskFilter",
                "ServerGroupAntiAffinityFilter",
                "ServerGroupAffinityFilter",
            }
        )
        assert selection.host not in {a[0] for a in selection.alternates}
    with session_scope(db_url) as session:
        for node in session.query(ComputeNode):
            usage, capacity = allocation_usage(session, node.id), node_capacity(node)
            assert all(usage[rc] <= capacity[rc] for rc in usage)
    chosen = [s.host for s in selections]
    if request["policy"] == "anti-affinity":
        assert len(set(chosen)) == len(chosen)
    if request["policy"] == "affinity":
        assert len(set(chosen)) == 1
