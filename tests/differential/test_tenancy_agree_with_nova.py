"""novaq against Nova 34's own classes on what a server's owner and a host's instances
decide: AggregateMultiTenancyIsolation (aggregates with ``filter_tenant_id*`` metadata,
the request's project), and ComputeCapabilitiesFilter on the resource tracker's stats
keys (``capabilities:stats:num_vm_active``...). For the latter, each host draws its
instances (vm_state, task_state, os_type, project); Nova's side counts them with its own
``nova.compute.stats.Stats``, novaq's with ``compute.stats.instance_stats``, so the
stats themselves are compared too.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from compute.stats import instance_stats
from scheduler.filters import load_filters
from tests.differential.cases import hosts, novaq_host, novaq_settings, novaq_spec, requests
from tests.differential.nova_process import Nova
from tests.differential.test_filters_agree_with_nova import BATCH, EXAMPLES, _same
from tests.differential.zones_pci_groups import novaq_flavor_problem

PROJECTS = ["p1", "p2", "p3", "demo"]
TENANT_KEYS = [
    "filter_tenant_id",
    "filter_tenant_id2",
    "filter_tenant_id_b",
    "filter_tenant",  # not the prefix
    "xfilter_tenant_id",
    "availability_zone",
]
TENANT_VALUES = ["p1", "p2", "p1,p2", " p2 , p3", "p3,", "p1,,p2", "demo"]

VM_STATES = ["active", "building", "stopped", "paused", "rescued", "resized", "error", "shelved"]
TASK_STATES = [
    None,
    "spawning",
    "resize_prep",
    "resize_migrating",
    "rebuilding",
    "rescuing",
    "unshelving",
    "image_snapshot",
    "powering-off",
]
OS_TYPES = [None, "linux", "windows"]
STATS_KEYS = [
    "capabilities:stats:num_instances",
    "capabilities:stats:io_workload",
    "capabilities:stats:num_vm_active",
    "capabilities:stats:num_vm_building",
    "capabilities:stats:num_task_None",
    "capabilities:stats:num_task_rescuing",
    "capabilities:stats:num_os_type_linux",
    "capabilities:stats:num_os_type_None",
    "capabilities:stats:num_proj_p1",
    "capabilities:stats:failed_builds",
    "capabilities:stats:num_instances:deeper",
    "capabilities:num_proj_p2",
    "capabilities:num_vm_stopped",
    "capabilities:num_instances",
    "num_vm_active",
    "num_proj_p1",
    "num_task_resize_prep",
    "io_workload",
    "num_io_ops",
    "capabilities:total_usable_ram_mb",
]
STATS_VALUES = ["0", "1", "2", ">= 1", "<= 1", "== 0", "s== 1", "<in> 1", "8192", ">= 4096"]


@st.composite
def tenancy_cases(draw: st.DrawFn) -> dict[str, Any]:
    host = draw(hosts())
    metadata = st.dictionaries(st.sampled_from(TENANT_KEYS), st.sampled_from(TENANT_VALUES))
    host["aggregates"] = draw(st.lists(metadata, max_size=3))
    request = {**draw(requests()), "image_properties": {}}
    request["project_id"] = draw(st.sampled_from(PROJECTS))
    return {"filter": "AggregateMultiTenancyIsolation", "host": host, "request": request}


@st.composite
def stats_cases(draw: st.DrawFn) -> dict[str, Any]:
    host = draw(hosts())
    instance = st.fixed_dictionaries(
        {
            "vm_state": st.sampled_from(VM_STATES),
            "task_state": st.sampled_from(TASK_STATES),
            "os_type": st.sampled_from(OS_TYPES),
            "project_id": st.sampled_from(PROJECTS),
        }
    )
    host["instance_states"] = draw(st.lists(instance, max_size=5))
    host["num_instances"] = len(host["instance_states"])
    specs = st.dictionaries(st.sampled_from(STATS_KEYS), st.sampled_from(STATS_VALUES), max_size=2)
    request = {**draw(requests()), "image_properties": {}, "extra_specs": draw(specs)}
    return {"filter": "ComputeCapabilitiesFilter", "host": host, "request": request}


def _novaq_verdict(case: dict[str, Any]) -> bool | str:
    data, request = case["host"], case["request"]
    problem = novaq_flavor_problem(request)  # a PCI alias spec the API refuses
    if problem is not None:
        return f"invalid: {problem}"
    host = novaq_host(data)
    if "instance_states" in data:
        groups = collections.Counter(
            (i["vm_state"], i["task_state"], i["os_type"], i["project_id"])
            for i in data["instance_states"]
        )
        host.stats = {"failed_builds": 0, **instance_stats((*k, n) for k, n in groups.items())}
        host.num_io_ops = host.stats.get("io_workload", 0)
    spec = novaq_spec(request)
    if "project_id" in request:
        spec = dataclasses.replace(spec, project_id=request["project_id"])
    (flt,) = load_filters(novaq_settings(), [case["filter"]])
    return flt.host_passes(host, spec)


def _agree(nova: Nova, cases: list[dict[str, Any]]) -> None:
    for case, nova_says in zip(cases, nova.verdicts(cases), strict=True):
        novaq_says = _novaq_verdict(case)
        assert _same(novaq_says, nova_says), (
            f"{case['filter']}: novaq {novaq_says!r}, Nova {nova_says!r}\n"
            f"host={json.dumps(case['host'])}\nrequest={json.dumps(case['request'])}"
        )


_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
def test_aggregate_multitenancy_isolation_gives_nova_s_verdicts(nova: Nova) -> None:
    @_SETTINGS
    @given(st.lists(tenancy_cases(), min_size=BATCH, max_size=BATCH))
    def agree(cases: list[dict[str, Any]]) -> None:
        _agree(nova, cases)

    agree()


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
def test_compute_capabilities_filter_sees_nova_s_stats(nova: Nova) -> None:
    @_SETTINGS
    @given(st.lists(stats_cases(), min_size=BATCH, max_size=BATCH))
    def agree(cases: list[dict[str, Any]]) -> None:
        _agree(nova, cases)

    agree()
