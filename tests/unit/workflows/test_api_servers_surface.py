"""The servers surface a Nova operator expects (issue 15), through the public API: a
server named instead of a uuid everywhere, update (name, description, metadata), boot's
min/max count, hints, group and metadata, and list's filters and pagination. Bad input
is refused with a clear error and nothing written or sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from novaq.exceptions import (
    FlavorNotFound,
    InstanceInvalidState,
    InstanceNotFound,
    InvalidInput,
    NotFound,
)
from tests.factories import flavor_dict
from tests.unit.workflows.bad_input import state
from tests.unit.workflows.servers import action_count, clear_queues, placed_server, queued
from workflows import api
from workflows.api.boot import MAX_COUNT
from workflows.api.common import AmbiguousServerName
from workflows.api.server_metadata import MAX_METADATA_ITEMS, MetadataItemNotFound
from workflows.api.server_query import MarkerNotFound


@pytest.fixture(autouse=True)
def _no_message_left() -> Iterator[None]:
    yield
    clear_queues("scheduler", "compute.host1")


def _boot(**kwargs: Any) -> list[str]:
    if not api.list_flavors():
        api.create_flavor("m1", 1, 512, 1)
    args: dict[str, Any] = {"name": "vm", "flavor": "m1", "image": "cirros"}
    args.update(kwargs)
    return list(api.boot(**args))


# -- a server by name ------------------------------------------------------------------------


def test_every_call_taking_a_server_takes_its_name(db_url: str) -> None:
    uuid = placed_server(db_url, display_name="web")
    assert api.show("web")["uuid"] == uuid
    assert [a["action"] for a in api.list_actions("web")] == ["create"]
    api.stop("web")
    assert api.show(uuid)["task_state"] == "powering-off"
    assert api.lock("web", reason="audit")["locked_reason"] == "audit"
    assert api.unlock("web")["locked"] is False


def test_a_name_two_servers_share_is_refused_and_nothing_is_done(db_url: str) -> None:
    first = placed_server(db_url, display_name="twin")
    placed_server(db_url, display_name="twin")
    before, actions = state(db_url), action_count(db_url)
    for call in (api.show, api.stop, api.delete, api.lock):
        with pytest.raises(AmbiguousServerName, match="2 servers are named 'twin'; use a uuid"):
            call("twin")
    with pytest.raises(AmbiguousServerName):
        api.update("twin", name="other")
    assert state(db_url) == before and action_count(db_url) == actions
    assert queued("compute.host1") == 0
    assert api.show(first)["name"] == "twin"  # the uuid still finds it


def test_an_unknown_name_is_not_found(db_url: str) -> None:
    with pytest.raises(InstanceNotFound, match="nosuch"):
        api.stop("nosuch")
    with pytest.raises(InvalidInput, match="server must be a name or a uuid"):
        api.show("")


# -- update: name, description, metadata -----------------------------------------------------


def test_update_renames_describes_and_changes_metadata(db_url: str) -> None:
    uuid = placed_server(db_url, display_name="old")
    view = api.update("old", name="new", description="the web tier")
    assert (view["name"], view["description"]) == ("new", "the web tier")
    view = api.update(uuid, metadata={"role": "web", "tier": "1"})
    assert view["metadata"] == {"role": "web", "tier": "1"}
    view = api.update("new", metadata={"tier": None, "owner": "ops"})
    assert view["metadata"] == {"owner": "ops", "role": "web"}
    assert api.update(uuid, description="")["description"] is None
    shown = api.show(uuid)
    assert (shown["name"], shown["metadata"]) == ("new", {"owner": "ops", "role": "web"})


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": ""}, InvalidInput, "server name must be a non-empty string"),
        ({"name": "a\nb"}, InvalidInput, "printable"),
        ({"description": "x" * 256}, InvalidInput, "description must be 0 to 255 characters"),
        ({"metadata": {"bad/key": "v"}}, InvalidInput, "metadata key must be 1 to 255"),
        ({"metadata": {"k": "v" * 256}}, InvalidInput, "metadata k must be 0 to 255"),
        ({"metadata": {"k": 3}}, InvalidInput, "metadata k must be a string"),
        ({"metadata": {"absent": None}}, MetadataItemNotFound, "no metadata item 'absent'"),
        (
            {"metadata": {f"k{i}": "v" for i in range(MAX_METADATA_ITEMS + 1)}},
            InvalidInput,
            f"at most {MAX_METADATA_ITEMS} metadata items",
        ),
    ],
)
def test_update_refuses_bad_input_and_writes_nothing(
    db_url: str, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    uuid = placed_server(db_url, display_name="vm")
    api.update(uuid, metadata={"keep": "1"})
    before = api.show(uuid)
    with pytest.raises(error, match=message):
        api.update(uuid, **kwargs)
    assert api.show(uuid) == before


def test_metadata_of_a_locked_or_busy_server_is_refused_but_a_rename_is_not(db_url: str) -> None:
    uuid = placed_server(db_url, display_name="vm")
    api.lock(uuid, reason="frozen")
    with pytest.raises(InstanceInvalidState, match=r"locked \(frozen\)"):
        api.update(uuid, metadata={"a": "1"})
    assert api.update(uuid, name="renamed")["name"] == "renamed"  # Nova: no lock check
    api.unlock(uuid)
    busy = placed_server(db_url, task_state="powering-off", display_name="busy")
    with pytest.raises(InstanceInvalidState, match="update_metadata"):
        api.update(busy, metadata={"a": "1"})
    assert api.show(uuid)["metadata"] == {} and api.show(busy)["metadata"] == {}


# -- boot: min/max count, hints, group, metadata ---------------------------------------------


def test_boot_max_count_creates_that_many_named_with_suffixes(db_url: str) -> None:
    uuids = _boot(min_count=2, max_count=3, metadata={"role": "web"}, description="pool")
    views = [api.show(u) for u in uuids]
    assert [v["name"] for v in views] == ["vm-1", "vm-2", "vm-3"]
    assert {v["status"] for v in views} == {"BUILD"}
    assert all(v["metadata"] == {"role": "web"} and v["description"] == "pool" for v in views)
    [single] = _boot(name="solo", min_count=1)
    assert api.show(single)["name"] == "solo"
    # max_count defaults to min_count
    assert len(_boot(name="pair", min_count=2)) == 2


def test_boot_lowers_max_count_to_the_request_limit_as_nova_lowers_it_to_the_quota(
    db_url: str,
) -> None:
    assert len(_boot(min_count=1, max_count=MAX_COUNT + 50)) == MAX_COUNT


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"min_count": 3, "max_count": 2}, InvalidInput, "min_count must be <= max_count"),
        ({"min_count": 0}, InvalidInput, "min_count must be 1 or more"),
        ({"max_count": 0}, InvalidInput, "max_count must be 1 or more"),
        ({"min_count": MAX_COUNT + 1}, InvalidInput, f"more than the {MAX_COUNT} servers"),
        ({"count": 2, "max_count": 3}, InvalidInput, "not both"),
        ({"min_count": "2"}, InvalidInput, "min_count must be an integer"),
        ({"group": "nosuch"}, NotFound, "Server group nosuch could not be found"),
        ({"hints": {"group": "nosuch"}}, NotFound, "Server group nosuch"),
        ({"hints": {"near": "[]"}}, InvalidInput, "unknown scheduler hint 'near'"),
        ({"hints": {"query": '["nand"]'}}, InvalidInput, "unknown operator 'nand'"),
        ({"hints": {"same_host": "nosuch"}}, InstanceNotFound, "nosuch"),
        ({"metadata": {"a b/c": "1"}}, InvalidInput, "metadata key"),
        ({"metadata": {"k": 1}}, InvalidInput, "metadata k must be a string"),
        ({"description": "x\x00"}, InvalidInput, "description must be printable"),
    ],
)
def test_boot_refuses_bad_counts_groups_hints_and_metadata(
    db_url: str, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    api.create_flavor("m1", 1, 512, 1)
    api.create_server_group("web", "anti-affinity")
    before = state(db_url)
    with pytest.raises(error, match=message):
        _boot(**kwargs)
    assert state(db_url) == before
    assert queued("scheduler") == 0


def test_boot_group_and_hints_by_name(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    group = api.create_server_group("web", "anti-affinity")
    uuids = _boot(group="web", max_count=2)
    assert api.list_server_groups()[0]["members"] == uuids
    [hinted] = _boot(name="db", hints={"group": group["id"], "different_host": ["vm-1"]})
    assert hinted in api.list_server_groups()[0]["members"]
    [same] = _boot(name="again", group="web", hints={"group": group["id"]})  # one group
    assert same in api.list_server_groups()[0]["members"]
    api.create_server_group("other", "affinity")
    with pytest.raises(InvalidInput, match="name different groups"):
        _boot(group="web", hints={"group": "other"})


def test_boot_refuses_a_group_name_two_groups_share(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    api.create_server_group("web", "anti-affinity")
    api.create_server_group("web", "affinity")
    with pytest.raises(InvalidInput, match="2 server groups are named 'web'"):
        _boot(group="web")
    assert api.list_instances() == []


def test_a_multi_create_that_does_not_all_fit_fails_whole(db_url: str, worker: None) -> None:
    """Nova's scheduler places every one of max_count or none (``_ensure_sufficient_hosts``):
    min_count only bounds what a quota may lower max_count to."""
    [host] = api.list_hosts()
    free = host["memory_mb"] - host["memory_mb_used"]
    api.create_flavor("third", 1, free // 3 + 1, 1)
    uuids = api.boot("big", "third", "cirros", min_count=1, max_count=3)
    views = [api.wait(u, "ERROR", timeout=30) for u in uuids]
    assert all(v["fault"]["message"].startswith("No valid host was found.") for v in views)
    assert api.list_hosts()[0]["memory_mb_used"] == host["memory_mb_used"]
    for uuid in uuids:
        api.delete(uuid)


# -- list: columns, filters, pagination ------------------------------------------------------


def test_list_shows_image_and_flavor_names(db_url: str) -> None:
    placed_server(db_url, display_name="vm")
    [row] = api.list_instances()
    assert (row["image_name"], row["flavor_name"]) == ("cirros", flavor_dict()["name"])


def test_list_filters_by_name_regex_status_host_and_flavor(db_url: str) -> None:
    web1 = placed_server(db_url, display_name="web-1")
    web2 = placed_server(db_url, display_name="web-2", vm_state="stopped")
    db = placed_server(db_url, display_name="db-1", flavor=flavor_dict(vcpus=2))
    other = placed_server(db_url, display_name="other", host="host2", node="host2")

    def names(**filters: Any) -> list[str]:
        return [r["uuid"] for r in api.list_instances(**filters)]

    assert names(name="^web-") == [web1, web2]
    assert names(name="-1$") == [web1, db]
    assert names(name="WEB") == []  # as Nova: case-sensitive
    assert names(status="shutoff") == [web2]
    assert names(status="ACTIVE", host="host1") == [web1, db]
    assert names(host="host2") == [other]
    assert names(flavor=flavor_dict(vcpus=2)["name"]) == [db]
    assert names(flavor=flavor_dict(vcpus=2)["id"], name="web") == []


def test_list_filters_by_lock(db_url: str) -> None:
    free = placed_server(db_url, display_name="free")
    held = placed_server(db_url, display_name="held")
    api.lock(held)
    assert [r["uuid"] for r in api.list_instances(locked=True)] == [held]
    assert [r["uuid"] for r in api.list_instances(locked=False)] == [free]
    with pytest.raises(InvalidInput, match="locked must be a boolean"):
        api.list_instances(locked="yes")


def test_list_deleted_shows_only_the_deleted_and_soft_deleted(db_url: str) -> None:
    live = placed_server(db_url, display_name="live")
    gone = placed_server(db_url, display_name="gone", vm_state="deleted", deleted=1)
    soft = placed_server(db_url, display_name="soft", vm_state="soft-delete")
    assert [r["uuid"] for r in api.list_instances()] == [live]
    assert [r["uuid"] for r in api.list_instances(deleted=True)] == [gone, soft]
    assert [r["uuid"] for r in api.list_instances(deleted=False)] == [live]
    assert [r["uuid"] for r in api.list_instances(status="DELETED")] == [gone]
    assert [r["uuid"] for r in api.list_instances(status="soft_deleted")] == [soft]
    assert api.list_instances(status="DELETED", deleted=False) == []
    assert api.show("soft")["uuid"] == soft  # still found by name: it can be restored


def test_list_pages_with_limit_and_marker(db_url: str) -> None:
    uuids = [placed_server(db_url, display_name=f"vm{i}") for i in range(5)]
    page = api.list_instances(limit=2)
    assert [r["uuid"] for r in page] == uuids[:2]
    page = api.list_instances(limit=2, marker=page[-1]["uuid"])
    assert [r["uuid"] for r in page] == uuids[2:4]
    assert [r["uuid"] for r in api.list_instances(marker=uuids[3])] == uuids[4:]
    assert api.list_instances(marker=uuids[4]) == []
    assert api.list_instances(limit=0) == []
    # the marker counts before the filters: after vm1, the names matching vm[0-3]
    assert [r["uuid"] for r in api.list_instances(marker=uuids[1], name="vm[0-3]")] == uuids[2:4]


@pytest.mark.parametrize(
    ("filters", "error", "message"),
    [
        ({"name": "web[("}, InvalidInput, "name must be a regular expression"),
        ({"status": "RUNNING"}, InvalidInput, "status must be one of ACTIVE"),
        ({"flavor": "nosuch"}, FlavorNotFound, "nosuch"),
        ({"marker": "00000000-0000-0000-0000-000000000000"}, MarkerNotFound, "Marker"),
        ({"limit": -1}, InvalidInput, "limit must be 0 or more"),
        ({"limit": "2"}, InvalidInput, "limit must be an integer"),
        ({"sort": "name"}, InvalidInput, "unknown filter 'sort'"),
    ],
)
def test_list_refuses_bad_filters(
    db_url: str, filters: dict[str, Any], error: type[Exception], message: str
) -> None:
    placed_server(db_url, display_name="web")
    with pytest.raises(error, match=message):
        api.list_instances(**filters)


def test_show_reports_the_lock_and_its_reason(db_url: str) -> None:
    uuid = placed_server(db_url, display_name="vm")
    api.lock(uuid, reason="maintenance window")
    view = api.show("vm")
    assert (view["locked"], view["locked_reason"]) == (True, "maintenance window")
