"""Aggregates, availability zones, server groups and hints through the public API."""

from __future__ import annotations

import pytest

from models.db import session_scope
from novaq.exceptions import InvalidInput, NotFound
from scheduler.candidates import load_host_states
from tests.factories import make_compute_node, make_settings
from workflows import api


def test_an_aggregate_with_a_zone_puts_its_hosts_in_that_zone(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    make_compute_node(db_url, "host2")
    aggregate = api.create_aggregate("rack1", availability_zone="az1")
    api.add_host_to_aggregate(aggregate["id"], "host1")
    api.set_aggregate_metadata(aggregate["id"], {"ssd": "true"})
    [view] = api.list_aggregates()
    assert view["availability_zone"] == "az1" and view["hosts"] == ["host1"]
    assert view["metadata"] == {"availability_zone": "az1", "ssd": "true"}
    with session_scope(db_url) as session:
        zones = {h.host: h.availability_zone for h in load_host_states(session, make_settings())}
    assert zones == {"host1": "az1", "host2": "nova"}
    api.set_aggregate_metadata(aggregate["id"], {"ssd": None})
    assert api.list_aggregates()[0]["metadata"] == {"availability_zone": "az1"}


def test_a_host_cannot_be_in_two_zones(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    one = api.create_aggregate("a", availability_zone="az1")
    two = api.create_aggregate("b", availability_zone="az2")
    api.add_host_to_aggregate(one["id"], "host1")
    with pytest.raises(InvalidInput, match="already in availability zone az1"):
        api.add_host_to_aggregate(two["id"], "host1")


def test_unknown_aggregates_and_hosts_are_refused(db_url: str) -> None:
    with pytest.raises(NotFound):
        api.add_host_to_aggregate(99, "host1")
    aggregate = api.create_aggregate("a")
    with pytest.raises(NotFound, match="host9"):
        api.add_host_to_aggregate(aggregate["id"], "host9")
    with pytest.raises(InvalidInput):
        api.create_aggregate("a")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("g", "sideways"), "policy must be one of"),
        (("g", "affinity", {"max_server_per_host": 2}), "for anti-affinity only"),
        (("g", "anti-affinity", {"max_server_per_host": 0}), "positive integer"),
        (("g", "anti-affinity", {"spread": 1}), "unknown server group rule 'spread'"),
        ((3, "affinity"), "must be a non-empty string"),
    ],
)
def test_server_group_creation_checks_policy_and_rules(
    db_url: str, args: tuple, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        api.create_server_group(*args)


def test_boot_refuses_an_unknown_group_zone_or_hint(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    with pytest.raises(NotFound, match="Server group"):
        api.boot("vm", "m1", "cirros", group="00000000-0000-0000-0000-000000000000")
    with pytest.raises(InvalidInput, match="availability zone 'mars' is not available"):
        api.boot("vm", "m1", "cirros", availability_zone="mars")
    with pytest.raises(InvalidInput, match="unknown scheduler hint"):
        api.boot("vm", "m1", "cirros", hints={"near": "x"})
    with pytest.raises(InvalidInput, match="must be an instance uuid"):
        api.boot("vm", "m1", "cirros", hints={"same_host": 3})
    assert api.list_instances() == []


def test_boot_into_a_group_records_the_members(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    group = api.create_server_group("web", "anti-affinity")
    uuids = api.boot("vm", "m1", "cirros", count=2, group=group["id"])
    [listed] = api.list_server_groups()
    assert listed["members"] == uuids and listed["policy"] == "anti-affinity"
