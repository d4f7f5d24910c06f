"""The query, build_near_host_ip and cidr hints through the API and the command line:
checked as Nova's API schema checks them (and refused where Nova's filter would only fail
later), carried in the request spec as Nova carries hints, and honoured by the scheduler."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

import pytest
from sqlalchemy import select

from compute.sessions import sessions_for
from models import Instance
from models.db import session_scope
from novaq.exceptions import InvalidInput
from scheduler.manager import Scheduler
from tests.factories import make_compute_node, make_instance, make_settings, spec_for
from tests.unit.cli import novaq, refused
from tests.unit.workflows.bad_input import state
from tests.unit.workflows.servers import clear_queues
from workflows import api
from workflows.api.boot import Hints

QUERY = '["and", [">=", "$free_ram_mb", 1024], ["=", "$hypervisor_type", "QEMU"]]'


@pytest.fixture(autouse=True)
def _no_message_left() -> Iterator[None]:
    yield
    clear_queues("scheduler")


def _stored_hints(uuid: str) -> dict[str, Any]:
    with session_scope(api.common.db_url(), read_only=True) as session:
        row = session.scalars(select(Instance).where(Instance.uuid == uuid)).one()
        return dict((row.request_spec or {})["hints"])


def test_boot_carries_the_hints_as_nova_s_request_spec_does(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    hints: Hints = {"query": QUERY, "build_near_host_ip": "10.0.0.1", "cidr": "/255.255.0.0"}
    [uuid] = api.boot("vm", "m1", "cirros", hints=hints)
    assert _stored_hints(uuid) == {key: [value] for key, value in dict(hints).items()}


def test_a_query_given_as_json_data_is_kept_as_its_text(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("vm", "m1", "cirros", hints={"query": [">=", "$vcpus_total", 4]})
    assert json.loads(_stored_hints(uuid)["query"][0]) == [">=", "$vcpus_total", 4]


@pytest.mark.parametrize(
    ("hints", "message"),
    [
        ({"query": "not json"}, "scheduler hint query must be a JSON query: not JSON"),
        ({"query": '["nand", 1]'}, "unknown operator 'nand'"),
        ({"query": '{"and": 1}'}, "a JSON list"),
        ({"query": 5}, "must be a JSON query \\(a string\\)"),
        ({"build_near_host_ip": "10.0.0.300"}, "build_near_host_ip must be an IPv4 or IPv6"),
        ({"build_near_host_ip": ""}, "build_near_host_ip must be an IPv4 or IPv6"),
        ({"build_near_host_ip": ["10.0.0.1"]}, "must be an IPv4 or IPv6 address \\(a string\\)"),
        ({"build_near_host_ip": "fe80::1%eth0"}, "no scope"),
        ({"cidr": "24"}, "scheduler hint cidr must be '/' and a prefix length"),
        ({"cidr": "/FF"}, "'/' and a prefix length"),  # Nova's pattern: lowercase hex
        ({"cidr": "/129"}, "a prefix length or a mask of IPv4 or IPv6"),
        ({"cidr": "/255.0.255.0"}, "a prefix length or a mask"),
        ({"build_near_host_ip": "10.0.0.1", "cidr": "/64"}, "does not fit build_near_host_ip"),
        ({"build_near_host_ip": "2001:db8::1", "cidr": "/0.0.0.255"}, "does not fit"),
    ],
)
def test_bad_hints_are_refused_and_change_nothing(
    db_url: str, hints: dict[str, Any], message: str
) -> None:
    api.create_flavor("m1", 1, 512, 1)
    before = state(db_url)
    with pytest.raises(InvalidInput, match=message):
        api.boot("vm", "m1", "cirros", hints=cast(Hints, hints))
    assert state(db_url) == before


def test_the_command_line_passes_the_hints_whole(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    result = novaq(
        "boot",
        "vm",
        "--flavor",
        "m1",
        "--hint",
        f"query={QUERY}",
        "--hint",
        "build_near_host_ip=10.0.0.1",
        "--hint",
        "cidr=/16",
        "--json",
    )
    assert result.exit_code == 0, result.output
    [shown] = json.loads(result.output)
    assert _stored_hints(shown["uuid"]) == {
        "query": [QUERY],
        "build_near_host_ip": ["10.0.0.1"],
        "cidr": ["/16"],
    }
    assert "unknown operator 'nand'" in refused(
        "boot", "vm2", "--flavor", "m1", "--hint", 'query=["nand"]'
    )


def test_the_scheduler_places_a_server_near_the_address_and_by_the_query(db_url: str) -> None:
    for host, address in (("host1", "10.0.0.5"), ("host2", "10.0.1.5"), ("host3", "10.0.1.6")):
        make_compute_node(
            db_url, host, settings=make_settings(my_ip=address), vcpus=4 * int(host[-1])
        )
    filters = ("ComputeFilter", "SimpleCIDRAffinityFilter", "JsonFilter")
    scheduler = Scheduler(make_settings(filter_scheduler={"enabled_filters": filters}))
    sessions = sessions_for(db_url)

    def placed(hints: dict[str, list[str]]) -> str | None:
        selection = scheduler.select_and_claim(
            sessions, spec_for(make_instance(db_url), hints=hints)
        )
        return None if selection is None else selection.host

    assert placed({"build_near_host_ip": ["10.0.0.1"]}) == "host1"
    near_both = {"build_near_host_ip": ["10.0.1.1"], "cidr": ["/24"]}
    assert placed({**near_both, "query": ['["=", "$vcpus_total", 12]']}) == "host3"
    assert placed({**near_both, "query": ['["<", "$vcpus_total", 12]']}) == "host2"
