"""JsonFilter: the query hint over Nova's HostState attribute names, with Nova's
operators and Nova's way of leaving out arguments it has no value for."""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable
from typing import Any

import pytest

from scheduler.filters import BaseFilter
from scheduler.filters.json_filter import ATTRIBUTES
from scheduler.filters.json_query import MAX_DEPTH, check_query
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

HostFactory = Callable[..., HostState]
SpecFactory = Callable[..., RequestSpec]

#: Nova's HostState attributes once the host manager updated it (host_manager.py).
NOVA_HOST_STATE = {
    "host", "nodename", "uuid", "_lock_name", "total_usable_ram_mb", "total_usable_disk_gb",
    "disk_mb_used", "free_ram_mb", "free_disk_mb", "vcpus_total", "vcpus_used", "pci_stats",
    "numa_topology", "num_instances", "num_io_ops", "failed_builds", "host_ip",
    "hypervisor_type", "hypervisor_version", "hypervisor_hostname", "cpu_info",
    "supported_instances", "limits", "metrics", "aggregates", "instances",
    "ram_allocation_ratio", "cpu_allocation_ratio", "disk_allocation_ratio", "cell_uuid",
    "updated", "allocation_candidates", "service", "stats",
}  # fmt: skip


@pytest.fixture
def json_filter(make_filter: Callable[..., BaseFilter]) -> BaseFilter:
    return make_filter("JsonFilter")


def _passes(flt: BaseFilter, host: HostState, spec: SpecFactory, query: Any) -> bool:
    return flt.host_passes(host, spec(hints={"query": [json.dumps(query)]}))


def test_every_attribute_of_nova_s_host_state_has_a_name(json_filter: BaseFilter) -> None:
    assert set(ATTRIBUTES) >= NOVA_HOST_STATE


def test_the_filter_passes_every_host_without_a_query(
    json_filter: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    assert json_filter.ignores(spec()) is True
    for empty in ("", "[]", "null", "{}"):
        assert json_filter.host_passes(host(), spec(hints={"query": [empty]})) is True


def test_nova_s_documented_query_keeps_hosts_with_room(
    json_filter: BaseFilter, host: HostFactory, spec: SpecFactory
) -> None:
    query = ["and", [">=", "$free_ram_mb", 1024], [">=", "$free_disk_mb", 200 * 1024]]
    assert _passes(json_filter, host(memory_mb_used=512, local_gb=250), spec, query) is True
    assert _passes(json_filter, host(memory_mb_used=7500, local_gb=250), spec, query) is False
    assert _passes(json_filter, host(local_gb=100), spec, query) is False


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (["=", "$vcpus_total", 8], True),
        (["=", "$vcpus_total", 8, 8.0], True),
        (["=", "$vcpus_total", 8, 4], False),  # the first against every other
        (["<", "$vcpus_used", 1, 2], True),
        ([">", "$vcpus_total"], False),  # fewer than two arguments
        (["in", "$host", "host9", "host1"], True),
        (["in", "$host", "host9"], False),
        (["=", "$num_instances", "0"], False),  # a number is not its text
        (["not", ["=", 1, 2]], True),  # a list of negations: any true passes
        (["not", ["=", 1, 1], ["=", 1, 2]], True),
        (["not", ["=", 1, 1]], False),
        (["and", ["not", ["=", 1, 1]]], True),  # Nova's and of a non-empty list
        (["or", ["=", 1, 2], ["=", "$host", "host1"]], True),
        (["and", ["=", 1, 1], []], True),  # an empty query is true
        (["=", "$no_such_thing", 1], False),  # an unknown name is left out
        (["=", "$no_such_thing", "", None, 1, 1], True),
        (["=", "$stats.failed_builds", "3"], True),  # stats are text, as Nova's
        (["=", "$service.disabled", False], True),
        (["=", "$service.host", "$host", "$hypervisor_hostname", "$nodename"], True),
        (["=", "$_lock_name", "host1-host1"], True),
        (["=", "$cell_uuid", "cell1"], True),
        (["=", "$limits", {}], True),
        (["=", "$host_ip", "$host_ip"], True),
        (["=", "$host_ip", "10.0.0.5"], False),  # an address is not its text
        (["or", "$metrics"], False),  # no metrics: Nova's empty list
        (["and", "$pci_stats", "$updated", "$allocation_candidates"], True),
        (["<=", "$updated", "$updated"], True),
        (["=", "$numa_topology", None, 1], False),
        (["in", "vm-1", "$instances.vm-1.uuid"], True),
        (["and", "$supported_instances", "$aggregates"], False),  # no aggregates: []
        (["=", "$aggregates", "$supported_instances"], False),
        (["=", "$cpu_info", '{"arch": "x86_64"}'], True),
    ],
)
def test_operators_and_names_evaluate_as_nova_s(
    json_filter: BaseFilter, host: HostFactory, spec: SpecFactory, query: Any, expected: bool
) -> None:
    state = host(
        stats={"failed_builds": 3},
        instances={"vm-1"},
        host_ip_text="10.0.0.5",
        cpu_info={"arch": "x86_64"},
        supported_instances=(("x86_64", "kvm", "hvm"),),
    )
    assert _passes(json_filter, state, spec, query) is expected


@pytest.mark.parametrize(
    "query",
    [
        ["<", "$host", 5],  # str < int
        ["<", "$host_ip", "10.0.0.9"],  # an address against text
        ["=", "$free_ram_mb.key", 1],  # .key on a number
        ["not", ["<", 5, 1, "x"]],  # every comparison is made, as Nova's
        ["=", "$cpu_info.arch", "x86_64"],  # cpu_info is JSON text, as in Nova
        ["<", "$pci_stats", 1],
    ],
)
def test_a_query_nova_s_filter_raises_on_refuses_the_host(
    json_filter: BaseFilter, host: HostFactory, spec: SpecFactory, query: Any
) -> None:
    assert _passes(json_filter, host(host_ip_text="10.0.0.5"), spec, query) is False


def test_the_host_ip_is_an_address_object(host: HostFactory) -> None:
    state = host(host_ip_text="2001:db8::5")
    assert ATTRIBUTES["host_ip"](state) == ipaddress.IPv6Address("2001:db8::5")


def test_instance_uuids_are_loaded_only_for_a_query_that_names_them(
    json_filter: BaseFilter, spec: SpecFactory
) -> None:
    assert json_filter.needs_instances(spec(hints={"query": ['["=", "$host", "h"]']})) is False
    assert json_filter.needs_instances(spec(hints={"query": ['["and", "$instances.x"]']})) is True
    assert json_filter.needs_instances(spec()) is False


def test_instance_stats_are_counted_only_for_a_query_that_names_them(
    json_filter: BaseFilter, spec: SpecFactory
) -> None:
    counted = spec(hints={"query": ['[">", "$stats.num_vm_active", 1]']})
    assert json_filter.reads_stats(counted) is True
    assert json_filter.reads_stats(spec(hints={"query": ['["=", "$host", "h"]']})) is False
    assert json_filter.reads_stats(spec()) is False


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("not json", "not JSON"),
        ('["and", ', "not JSON"),
        ('{"and": 1}', "a JSON list"),
        ('"=aa"', "a JSON list"),  # Nova reads this string's characters as a query
        ("5", "a JSON list"),
        ('["nand", 1]', "unknown operator 'nand'"),
        ('["and", [1, 2]]', "unknown operator 1"),
        ("[" * (MAX_DEPTH + 1) + '"and"' + "]" * (MAX_DEPTH + 1), "unknown operator"),
        ('["and", ' * (MAX_DEPTH + 1) + "1" + "]" * (MAX_DEPTH + 1), "nested deeper"),
    ],
)
def test_a_text_that_is_no_query_is_refused_and_refuses_every_host(
    json_filter: BaseFilter, host: HostFactory, spec: SpecFactory, text: str, reason: str
) -> None:
    with pytest.raises(ValueError, match=reason):
        check_query(text)
    assert json_filter.host_passes(host(), spec(hints={"query": [text]})) is False
