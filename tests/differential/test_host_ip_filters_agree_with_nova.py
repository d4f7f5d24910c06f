"""SimpleCIDRAffinityFilter, JsonFilter and ComputeCapabilitiesFilter's ``host_ip`` against
Nova 34's own classes, verdict by verdict, on randomized hosts (``cases.hosts`` with a
``host_ip``) and requests with the ``build_near_host_ip``/``cidr`` and ``query`` hints.

Hints novaq's API refuses (``workflows.api.hints``: a cidr with no network for the
address, a query that is not JSON or names an unknown operator) must make Nova's filter
raise (the whole request fails there); every other case must get Nova's verdict, a host
Nova's filter raises on being refused by novaq's (``_same``).
"""

from __future__ import annotations

import json
import os
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from novaq.exceptions import InvalidInput
from scheduler.filters import load_filters
from tests.differential.cases import UUIDS, hosts, novaq_host, novaq_settings, novaq_spec, requests
from tests.differential.nova_process import Nova
from tests.differential.test_filters_agree_with_nova import _same
from tests.differential.zones_pci_groups import novaq_flavor_problem
from workflows.api.boot import Hints
from workflows.api.hints import host_hints
from workflows.api.validation import validated

BATCH = 40
EXAMPLES = int(os.environ.get("NOVAQ_DIFFERENTIAL_EXAMPLES", "15"))

HOST_IPS = [
    "10.0.0.5",
    "10.0.0.200",
    "10.0.1.7",
    "10.1.0.1",
    "192.168.1.1",
    "127.0.1.3",
    "2001:db8::5",
    "2001:db8:0:1::5",
    "::ffff:10.0.0.5",
    None,
]
NEAR = ["10.0.0.1", "10.0.1.1", "10.255.0.1", "192.168.1.254", "2001:db8::1", "2001:db9::1"]
CIDRS = [
    "/24",
    "/30",
    "/0",
    "/8",
    "/16",
    "/32",
    "/024",
    "/255.255.255.0",
    "/255.255.0.0",
    "/0.0.0.255",
    "/0.0.255.255",
    "/64",
    "/32",
    "/120",
    "/128",
    "/ffff:ffff::",
    "/::ffff",
    "/33",
    "/129",
    "/255.0.255.0",
    "/1.2",
]
HOST_IP_SPECS = ["capabilities:host_ip", "host_ip"]
HOST_IP_VALUES = [
    "10.0.0.5",
    "s== 10.0.0.5",
    "s!= 10.0.0.5",
    "<in> 10.0.",
    "<in> 2001:db8",
    "<or> 10.0.0.5 <or> 2001:db8::5",
    "s>= 10.0.0.100",
    ">= 4",
]

#: ``$names`` whose value the Nova side's test host state (``nova_verdicts._host_state``)
#: builds as Nova's scheduler does. Left out: ``stats`` (the test host's differ),
#: ``service`` keys but host/binary/disabled, ``allocation_candidates`` (empty there,
#: never in Nova's scheduler), ``metrics``.
VARIABLES = [
    "$free_ram_mb",
    "$free_disk_mb",
    "$total_usable_ram_mb",
    "$total_usable_disk_gb",
    "$disk_mb_used",
    "$vcpus_total",
    "$vcpus_used",
    "$num_instances",
    "$num_io_ops",
    "$failed_builds",
    "$host",
    "$nodename",
    "$hypervisor_hostname",
    "$hypervisor_type",
    "$hypervisor_version",
    "$host_ip",
    "$cpu_allocation_ratio",
    "$ram_allocation_ratio",
    "$disk_allocation_ratio",
    "$uuid",
    "$_lock_name",
    "$cpu_info",
    "$cpu_info.arch",
    "$supported_instances",
    "$limits",
    "$limits.numa_topology",
    "$service.disabled",
    "$service.host",
    "$service.binary",
    f"$instances.{UUIDS[0]}",
    f"$instances.{UUIDS[1]}.uuid",
    "$instances",
    "$aggregates",
    "$numa_topology",
    "$pci_stats",
    "$updated",
    "$cell_uuid",
    "$no_such_attribute",
    "$free_ram_mb.key",
    "$",
]
LITERALS: list[Any] = [
    0,
    1,
    2,
    8,
    50,
    512,
    1024,
    4096,
    2.5,
    -1,
    True,
    False,
    None,
    "",
    "host1",
    "host2",
    "QEMU",
    "10.0.0.5",
    "x86_64",
    "cell1",
    [],
    {},
]
OPERATORS = ["=", "<", ">", "in", "<=", ">=", "not", "or", "and"]
BAD_QUERIES = [
    "not json",
    '["and", ',
    '["nand", 1, 2]',
    '["and", ["bogus", 1]]',
    "[1, 2]",
    '[["=", 1, 1]]',
    '{"and": 1}',
    "5",
    "true",
]
EMPTY_QUERIES = ["[]", "null", '""', "{}", "0"]


def _queries() -> st.SearchStrategy[Any]:
    leaves = st.one_of(st.sampled_from(VARIABLES), st.sampled_from(LITERALS))
    return st.recursive(
        st.builds(
            lambda op, args: [op, *args],
            st.sampled_from(OPERATORS),
            st.lists(leaves, max_size=3),
        ),
        lambda inner: st.builds(
            lambda op, args: [op, *args],
            st.sampled_from(OPERATORS),
            st.lists(st.one_of(inner, leaves), max_size=3),
        ),
        max_leaves=8,
    )


def _query_text() -> st.SearchStrategy[str]:
    good = _queries().map(json.dumps)
    return st.one_of(
        good, good, good, good, st.sampled_from(BAD_QUERIES), st.sampled_from(EMPTY_QUERIES)
    )


@st.composite
def host_ip_hosts(draw: st.DrawFn) -> dict[str, Any]:
    host = draw(hosts())
    host["host_ip"] = draw(st.sampled_from(HOST_IPS))
    return host


@st.composite
def near_requests(draw: st.DrawFn) -> dict[str, Any]:
    request = draw(requests())
    hints: dict[str, list[str]] = {"build_near_host_ip": [draw(st.sampled_from(NEAR))]}
    if draw(st.booleans()):
        hints["cidr"] = [draw(st.sampled_from(CIDRS))]
    return {**request, "image_properties": {}, "hints": hints}


@st.composite
def query_requests(draw: st.DrawFn) -> dict[str, Any]:
    request = draw(requests())
    return {**request, "image_properties": {}, "hints": {"query": [draw(_query_text())]}}


@st.composite
def host_ip_spec_requests(draw: st.DrawFn) -> dict[str, Any]:
    request = draw(requests())
    key, value = draw(st.sampled_from(HOST_IP_SPECS)), draw(st.sampled_from(HOST_IP_VALUES))
    return {**request, "image_properties": {}, "extra_specs": {key: value}, "hints": {}}


CASES = {
    "SimpleCIDRAffinityFilter": near_requests(),
    "JsonFilter": query_requests(),
    "ComputeCapabilitiesFilter": host_ip_spec_requests(),
}


@validated(items={"hints": "scheduler hint"})
def _api_hints(hints: Hints) -> dict[str, list[str]]:
    # What boot does with these hints: its annotations, then the cross-check.
    return host_hints(dict(hints))


def _api_check(hints: dict[str, list[str]]) -> str | None:
    """Why novaq's API refuses these hints (None: it takes them)."""
    try:
        _api_hints(cast(Hints, {key: values[0] for key, values in hints.items()}))
    except InvalidInput as exc:
        return str(exc)
    return None


def _novaq_verdict(name: str, case: dict[str, Any]) -> bool | str:
    refused = _api_check(case["request"]["hints"]) or novaq_flavor_problem(case["request"])
    if refused is not None:
        return f"invalid: {refused}"
    (flt,) = load_filters(novaq_settings(), [name])
    return flt.host_passes(novaq_host(case["host"]), novaq_spec(case["request"]))


def _agrees(novaq: bool | str, theirs: bool | str) -> bool:
    if isinstance(novaq, str):  # refused by the API: Nova's filter must raise (or Nova's
        # API refuse the flavor's PCI alias spec too)
        return isinstance(theirs, str) and theirs.startswith(("raised:", "invalid:"))
    return _same(novaq, theirs)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_host_ip_and_query_filters_give_nova_s_verdicts(nova: Nova, name: str) -> None:
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.lists(st.tuples(host_ip_hosts(), CASES[name]), min_size=BATCH, max_size=BATCH))
    def agree(pairs: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
        cases = [{"filter": name, "host": h, "request": r} for h, r in pairs]
        theirs = nova.verdicts(cases)
        for case, nova_says in zip(cases, theirs, strict=True):
            novaq_says = _novaq_verdict(name, case)
            assert _agrees(novaq_says, nova_says), (
                f"{name}: novaq {novaq_says!r}, Nova {nova_says!r}\n"
                f"host={json.dumps(case['host'])}\nrequest={json.dumps(case['request'])}"
            )

    agree()
