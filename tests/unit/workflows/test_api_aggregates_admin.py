"""Aggregates and server groups after create (issue 15): show and delete (an aggregate
with hosts is refused, as Nova), remove a host (refused where Nova refuses it: the host
would change zone under its servers), set metadata with unset, through the API and the
``novaq`` command; bad input refused with nothing written."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from models import AggregateMetadata
from models.db import session_scope
from novaq.cli import main
from novaq.exceptions import ComputeHostNotFound, InvalidInput
from tests.factories import make_compute_node
from tests.unit.cli import novaq_json as _run
from tests.unit.cli import refused as _refused
from tests.unit.workflows.bad_input import state
from tests.unit.workflows.servers import placed_server
from workflows import api
from workflows.api import aggregates
from workflows.api.aggregates import (
    AggregateHostNotFound,
    AggregateNotFound,
    InvalidAggregateAction,
    ServerGroupNotFound,
)

# -- aggregates -------------------------------------------------------------------------------


def test_show_by_id_or_name(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    created = api.create_aggregate("rack1", "az1")
    api.add_host_to_aggregate(created["id"], "host1")
    view = api.show_aggregate("rack1")
    assert view == api.show_aggregate(created["id"]) == api.show_aggregate(str(created["id"]))
    assert (view["availability_zone"], view["hosts"]) == ("az1", ["host1"])
    assert _run("aggregate-show", "rack1") == view
    with pytest.raises(AggregateNotFound, match="rack9"):
        api.show_aggregate("rack9")
    with pytest.raises(AggregateNotFound, match="99"):
        api.show_aggregate(99)
    with pytest.raises(InvalidInput, match="aggregate must be an aggregate id or name"):
        api.show_aggregate(1.5)
    assert "AggregateNotFound" in _refused("aggregate-show", "rack9")


def test_a_name_of_digits_is_an_id_first_then_a_name(db_url: str) -> None:
    first = api.create_aggregate("a")
    named = api.create_aggregate(str(first["id"] + 100))
    assert api.show_aggregate(str(first["id"]))["name"] == "a"
    assert api.show_aggregate(named["name"])["id"] == named["id"]


def test_delete_an_empty_aggregate(db_url: str) -> None:
    api.create_aggregate("rack1", "az1")
    api.set_aggregate_metadata(api.show_aggregate("rack1")["id"], {"ssd": "true"})
    assert api.delete_aggregate("rack1")["name"] == "rack1"
    assert api.list_aggregates() == []
    with session_scope(db_url) as session:  # its metadata went with it
        assert session.scalars(select(AggregateMetadata)).all() == []
    api.create_aggregate("rack2")
    result = CliRunner().invoke(main, ["aggregate-delete", "rack2"])
    assert result.exit_code == 0 and "Deleted aggregate rack2" in result.output, result.output
    assert api.list_aggregates() == []


def test_deleting_an_aggregate_with_hosts_is_refused_and_changes_nothing(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    aggregate = api.create_aggregate("rack1", "az1")
    api.add_host_to_aggregate(aggregate["id"], "host1")
    before = state(db_url)
    with pytest.raises(InvalidAggregateAction, match="Host aggregate is not empty"):
        api.delete_aggregate("rack1")
    assert "Host aggregate is not empty" in _refused("aggregate-delete", "rack1")
    assert "AggregateNotFound" in _refused("aggregate-delete", "rack9")
    assert state(db_url) == before


def test_remove_host_then_delete(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    aggregate = api.create_aggregate("rack1")
    api.add_host_to_aggregate(aggregate["id"], "host1")
    assert _run("aggregate-remove-host", "rack1", "host1")["hosts"] == []
    api.add_host_to_aggregate(aggregate["id"], "host1")
    assert api.remove_host_from_aggregate(aggregate["id"], "host1")["hosts"] == []
    assert api.delete_aggregate(aggregate["id"])["id"] == aggregate["id"]


def test_remove_host_refuses_what_nova_refuses_and_changes_nothing(db_url: str) -> None:
    placed_server(db_url, "active")  # host1, with a server
    make_compute_node(db_url, "host2")
    zoned = api.create_aggregate("rack1", "az1")
    api.add_host_to_aggregate(zoned["id"], "host1")
    before = state(db_url), api.list_aggregates()
    with pytest.raises(ComputeHostNotFound, match="host9"):
        api.remove_host_from_aggregate(zoned["id"], "host9")
    with pytest.raises(AggregateHostNotFound, match="has no host host2"):
        api.remove_host_from_aggregate(zoned["id"], "host2")
    with pytest.raises(InvalidAggregateAction, match="would change from 'az1' to None"):
        api.remove_host_from_aggregate(zoned["id"], "host1")
    with pytest.raises(AggregateNotFound):
        api.remove_host_from_aggregate(99, "host1")
    assert "AggregateHostNotFound" in _refused("aggregate-remove-host", "rack1", "host2")
    assert "ComputeHostNotFound" in _refused("aggregate-remove-host", "rack1", "host9")
    assert "AggregateNotFound" in _refused("aggregate-remove-host", "rack9", "host1")
    assert (state(db_url), api.list_aggregates()) == before


def test_remove_host_keeps_servers_in_their_zone_through_another_aggregate(db_url: str) -> None:
    placed_server(db_url, "active")
    first = api.create_aggregate("rack1", "az1")
    second = api.create_aggregate("power1", "az1")
    plain = api.create_aggregate("ssd")
    for aggregate in (first, second, plain):
        api.add_host_to_aggregate(aggregate["id"], "host1")
    assert api.remove_host_from_aggregate(plain["id"], "host1")["hosts"] == []  # no zone
    assert api.remove_host_from_aggregate(first["id"], "host1")["hosts"] == []  # still az1
    assert api.show_hypervisor("host1")["availability_zone"] == "az1"


def test_set_metadata_with_unset_through_the_command(db_url: str) -> None:
    api.create_aggregate("rack1")
    view = _run("aggregate-set-metadata", "rack1", "ssd=true", "speed=10")
    assert view["metadata"] == {"speed": "10", "ssd": "true"}
    view = _run("aggregate-set-metadata", "rack1", "ssd", "never-set", "gpu=1")
    assert view["metadata"] == {"gpu": "1", "speed": "10"}  # a key not set is no error


def test_add_host_takes_the_aggregate_by_name(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    api.create_aggregate("rack1")
    assert _run("aggregate-add-host", "rack1", "host1")["hosts"] == ["host1"]
    assert "AggregateNotFound" in _refused("aggregate-add-host", "rack9", "host1")


def test_the_zone_is_never_unset_nor_moved_under_servers(db_url: str) -> None:
    placed_server(db_url, "active")
    aggregate = api.create_aggregate("rack1", "az1")
    api.add_host_to_aggregate(aggregate["id"], "host1")
    before = state(db_url), api.list_aggregates()
    with pytest.raises(InvalidAggregateAction, match="does not support empty named"):
        api.set_aggregate_metadata(aggregate["id"], {"availability_zone": None})
    with pytest.raises(InvalidAggregateAction, match="hosts contain instances in this zone"):
        api.set_aggregate_metadata(aggregate["id"], {"availability_zone": "az2", "x": "1"})
    assert "does not support empty named" in _refused(
        "aggregate-set-metadata", "rack1", "availability_zone"
    )
    assert (state(db_url), api.list_aggregates()) == before
    same = api.set_aggregate_metadata(aggregate["id"], {"availability_zone": "az1", "x": "1"})
    assert same["metadata"] == {"availability_zone": "az1", "x": "1"}


def test_the_zone_of_an_aggregate_without_servers_may_change(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    aggregate = api.create_aggregate("rack1", "az1")
    api.add_host_to_aggregate(aggregate["id"], "host1")
    view = api.set_aggregate_metadata(aggregate["id"], {"availability_zone": "az2"})
    assert view["availability_zone"] == "az2"


# -- server groups ----------------------------------------------------------------------------


def test_server_group_show_and_delete_by_uuid_or_name(db_url: str) -> None:
    group = api.create_server_group("web", "anti-affinity", {"max_server_per_host": 2})
    assert api.show_server_group("web") == api.show_server_group(group["id"]) == group
    assert _run("server-group-show", "web") == group
    result = CliRunner().invoke(main, ["server-group-delete", "web"])
    assert result.exit_code == 0, result.output
    assert f"Deleted server group web ({group['id']})" in result.output
    assert api.list_server_groups() == []
    other = api.create_server_group("db", "affinity")
    assert api.delete_server_group(other["id"]) == other
    assert api.list_server_groups() == []


def test_deleting_a_group_leaves_its_servers_running(db_url: str) -> None:
    uuid = placed_server(db_url, "active")
    group = api.create_server_group("web", "affinity")
    with session_scope(db_url) as session:
        aggregates.add_members(aggregates.get_server_group(session, group["id"]), [uuid])
    assert api.show_server_group("web")["members"] == [uuid]
    api.delete_server_group("web")
    assert api.show(uuid)["status"] == "ACTIVE"


def test_bad_server_group_requests_are_refused_and_change_nothing(db_url: str) -> None:
    api.create_server_group("web", "affinity")
    api.create_server_group("web", "anti-affinity")
    before = state(db_url)
    with pytest.raises(ServerGroupNotFound, match="nope"):
        api.show_server_group("nope")
    with pytest.raises(ServerGroupNotFound, match="nope"):
        api.delete_server_group("nope")
    with pytest.raises(InvalidInput, match="2 server groups are named 'web'"):
        api.delete_server_group("web")
    with pytest.raises(InvalidInput, match="server group must be a non-empty string"):
        api.show_server_group(5)
    assert "ServerGroupNotFound" in _refused("server-group-show", "nope")
    assert "2 server groups are named" in _refused("server-group-delete", "web")
    assert state(db_url) == before


def test_server_group_delete_carries_on_past_a_group_it_cannot_delete(db_url: str) -> None:
    first = api.create_server_group("a", "affinity")
    api.create_server_group("b", "affinity")
    result = CliRunner().invoke(main, ["server-group-delete", "a", "nope", "b"])
    assert result.exit_code == 1, result.output
    output = " ".join(result.output.split())
    assert f"Deleted server group a ({first['id']})" in output
    assert "ERROR (ServerGroupNotFound): nope: Server group nope could not be found." in output
    assert "Deleted server group b" in output
    assert api.list_server_groups() == []
