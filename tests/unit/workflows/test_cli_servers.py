"""The servers surface through the real ``novaq`` command (click's runner): names for
servers, verbs on several servers that go on past a failure, tables that keep whole
uuids and host names when piped, ``--version``, boot's counts, hints, group and
properties, list's filters, update/rename/meta, lock reasons."""

from __future__ import annotations

import importlib.metadata
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.cli import novaq
from tests.unit.workflows.bad_input import state
from tests.unit.workflows.servers import clear_queues, placed_server, queued
from workflows import api

LONG_HOST = "compute-rack42-slot17.datacentre-west.example.org"


@pytest.fixture(autouse=True)
def _no_message_left() -> Iterator[None]:
    yield
    clear_queues("scheduler", "compute.host1")


def test_version() -> None:
    result = novaq("--version")
    assert result.exit_code == 0
    assert result.output.strip() == f"novaq, version {importlib.metadata.version('novaq')}"


def test_a_piped_table_keeps_whole_uuids_and_host_names(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A terminal 60 columns wide elsewhere (rich read it from stderr or COLUMNS and cut
    # every cell to fit): stdout is piped, so nothing is cut.
    monkeypatch.setenv("COLUMNS", "60")
    uuid = placed_server(db_url, display_name="a-server-with-a-rather-long-name", host=LONG_HOST)
    result = novaq("list")
    assert result.exit_code == 0, result.output
    assert uuid in result.output and LONG_HOST in result.output
    assert "…" not in result.output
    [line] = [line for line in result.output.splitlines() if uuid in line]
    assert "cirros" in line and "test.1" in line  # Image and Flavor columns
    assert json.loads(novaq("list", "--json").output)[0]["host"] == LONG_HOST


def test_a_verb_on_several_servers_goes_on_past_a_failure(db_url: str) -> None:
    first = placed_server(db_url, display_name="a")
    placed_server(db_url, display_name="b")
    third = placed_server(db_url, display_name="c", vm_state="stopped")
    result = novaq("stop", "a", "nosuch", "c", "b")
    assert result.exit_code == 1
    assert "Request to stop server a has been accepted" in result.output
    assert "Request to stop server b has been accepted" in result.output
    assert "ERROR (InstanceNotFound): stop nosuch:" in result.output
    assert "ERROR (InstanceInvalidState): stop c:" in result.output
    assert "2 of 4 requests to stop failed" in result.output
    assert api.show(first)["task_state"] == "powering-off"
    assert api.show(third)["task_state"] is None
    assert queued("compute.host1") == 2


def test_delete_of_several_goes_on_past_a_failure(db_url: str) -> None:
    placed_server(db_url, display_name="a", host=None, node=None, vm_state="error")
    result = novaq("delete", "nosuch", "a")
    assert result.exit_code == 1
    assert "Request to delete server a has been accepted" in result.output
    assert api.list_instances() == []


def test_delete_by_name_waits_on_the_uuid_the_name_found(db_url: str) -> None:
    """Once deleted, the name finds no server: the wait follows the uuid instead."""
    uuid = placed_server(db_url, display_name="a", host=None, node=None, vm_state="error")
    result = novaq("delete", "a", "--wait", "10")
    assert result.exit_code == 0, result.output
    assert api.show(uuid)["status"] == "DELETED"


def test_a_verb_on_servers_that_all_succeed_exits_0(db_url: str) -> None:
    placed_server(db_url, display_name="a")
    placed_server(db_url, display_name="b")
    result = novaq("lock", "a", "b", "--reason", "change 42")
    assert result.exit_code == 0, result.output
    shown = novaq("show", "a")
    assert shown.exit_code == 0
    assert "locked_reason" in shown.output and "change 42" in shown.output
    assert json.loads(novaq("show", "b", "--json").output)["locked"] is True
    assert novaq("unlock", "a", "b").exit_code == 0
    assert api.show("a")["locked_reason"] is None


def test_an_ambiguous_name_is_refused_by_the_command(db_url: str) -> None:
    placed_server(db_url, display_name="twin")
    placed_server(db_url, display_name="twin")
    before = state(db_url)
    for argv in (("show", "twin"), ("stop", "twin"), ("rename", "twin", "x"), ("delete", "twin")):
        result = novaq(*argv)
        assert result.exit_code == 1, argv
        assert "ERROR (AmbiguousServerName)" in result.output
        assert "2 servers are named 'twin'" in result.output
    assert state(db_url) == before


def test_boot_with_counts_group_hint_and_properties(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    api.create_server_group("web", "anti-affinity")
    placed_server(db_url, display_name="db")
    result = novaq(
        "boot",
        "web",
        "--flavor",
        "m1",
        "--min-count",
        "2",
        "--max-count",
        "3",
        "--group",
        "web",
        "--hint",
        "different_host=db",
        "--property",
        "role=frontend",
        "--meta",  # the nova client's name for it
        "tier=1",
        "--json",
    )
    assert result.exit_code == 0, result.output
    booted = json.loads(result.output)
    assert [s["name"] for s in booted] == ["web-1", "web-2", "web-3"]
    assert all(s["metadata"] == {"role": "frontend", "tier": "1"} for s in booted)
    assert api.list_server_groups()[0]["members"] == [s["uuid"] for s in booted]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--min-count", "3", "--max-count", "2"], "min_count must be <= max_count"),
        (["--group", "nosuch"], "Server group nosuch could not be found"),
        (["--hint", "near=[]"], "unknown scheduler hint 'near'"),
        (["--hint", "same_host"], "is not KEY=VALUE"),
        (["--property", "a/b=1"], "metadata key"),
    ],
)
def test_boot_refuses_bad_input_and_writes_nothing(
    db_url: str, argv: list[str], message: str
) -> None:
    api.create_flavor("m1", 1, 512, 1)
    before = state(db_url)
    result = novaq("boot", "vm", "--flavor", "m1", *argv)
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert state(db_url) == before


def test_list_filters_and_pages(db_url: str) -> None:
    uuids = [placed_server(db_url, display_name=f"web-{i}") for i in range(3)]
    placed_server(db_url, display_name="db", vm_state="stopped")

    def listed(*argv: str) -> list[str]:
        result = novaq("list", "--json", *argv)
        assert result.exit_code == 0, result.output
        return [s["uuid"] for s in json.loads(result.output)]

    assert listed("--name", "^web") == uuids
    assert listed("--name", "^web", "--limit", "2") == uuids[:2]
    assert listed("--name", "^web", "--marker", uuids[0]) == uuids[1:]
    assert len(listed("--status", "SHUTOFF")) == 1
    assert listed("--host", "host1", "--flavor", "test.1", "--name", "web-2") == uuids[2:]
    assert listed("--deleted") == []
    api.lock(uuids[1])
    assert listed("--locked") == uuids[1:2]
    assert len(listed("--unlocked")) == 3


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--name", "web[("], "InvalidInput"),
        (["--marker", "00000000-0000-0000-0000-000000000000"], "MarkerNotFound"),
        (["--status", "RUNNING"], "InvalidInput"),
        (["--flavor", "nosuch"], "FlavorNotFound"),
    ],
)
def test_list_refuses_bad_filters(db_url: str, argv: list[str], error: str) -> None:
    placed_server(db_url, display_name="web")
    result = novaq("list", *argv)
    assert result.exit_code == 1
    assert f"ERROR ({error})" in result.output


def test_update_rename_and_meta(db_url: str) -> None:
    uuid = placed_server(db_url, display_name="old")
    result = novaq("rename", "old", "new")
    assert result.exit_code == 0 and "new" in result.output
    result = novaq("update", "new", "--description", "the web tier", "--json")
    assert json.loads(result.output)["description"] == "the web tier"
    assert novaq("meta", "new", "set", "a=1", "b=x=y").exit_code == 0
    assert api.show(uuid)["metadata"] == {"a": "1", "b": "x=y"}
    assert novaq("meta", uuid, "delete", "a").exit_code == 0
    assert api.show(uuid)["metadata"] == {"b": "x=y"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["meta", "vm", "delete", "absent"], "no metadata item 'absent'"),
        (["meta", "vm", "set", "novalue"], "is not KEY=VALUE"),
        (["meta", "vm", "unset", "a"], "'unset' is not one of 'set', 'delete'"),
        (["update", "vm"], "give --name or --description"),
        (["update", "vm", "--name", ""], "server name must be a non-empty string"),
        (["rename", "nosuch", "x"], "nosuch"),
    ],
)
def test_update_and_meta_refuse_bad_input_and_write_nothing(
    db_url: str, argv: list[str], message: str
) -> None:
    uuid = placed_server(db_url, display_name="vm")
    api.update(uuid, metadata={"a": "1"})
    before = (state(db_url), api.show(uuid))
    result = novaq(*argv)
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert (state(db_url), api.show(uuid)) == before


def test_every_server_command_takes_a_name(db_url: str) -> None:
    placed_server(db_url, display_name="vm")
    for argv in (
        ("show", "vm"),
        ("instance-action-list", "vm"),
        ("pause", "vm"),
    ):
        result = novaq(*argv)
        assert result.exit_code == 0, (argv, result.output)


def _resize_accepted(db_url: str) -> Any:
    api.create_flavor("m2", 2, 1024, 2)
    placed_server(db_url, display_name="vm")
    return novaq("resize", "vm", "m2")


def test_move_commands_take_a_name(db_url: str) -> None:
    result = _resize_accepted(db_url)
    assert result.exit_code == 0, result.output
    assert "Request to resize server vm has been accepted" in result.output
    listed = novaq("migration-list", "--instance", "vm", "--json")
    assert listed.exit_code == 0, listed.output
    assert [m["migration_type"] for m in json.loads(listed.output)] == ["resize"]


def test_a_console_made_under_a_narrow_columns_still_cuts_nothing_when_piped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rich fixes its width from $COLUMNS when the console is made (at import, whatever
    # the process's environment was then); piped output must not keep that width.
    from novaq.cli import base

    monkeypatch.setenv("COLUMNS", "60")
    piped = base._Console(file=io.StringIO())
    assert piped.size.width == base.UNBOUNDED
    assert base._Console(file=io.StringIO(), width=70).size.width == 70  # explicit wins


def test_boot_as_a_project_needs_access_to_a_private_flavor(db_url: str) -> None:
    api.create_flavor("private", 1, 512, 1, is_public=False)
    api.add_flavor_access("private", "demo")
    before = state(db_url)
    refused = novaq("boot", "vm", "--flavor", "private", "--project", "other")
    assert refused.exit_code == 1 and "ERROR (FlavorNotFound)" in refused.output
    assert state(db_url) == before
    result = novaq("boot", "vm", "--flavor", "private", "--project", "demo", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)[0]["name"] == "vm"


@pytest.mark.usefixtures("worker")
def test_boot_wait_reports_every_server_that_failed_and_exits_1(db_url: str) -> None:
    api.create_flavor("huge", 512, 512, 1)  # no host has 512 vCPUs: NoValidHost
    result = novaq("boot", "big", "--flavor", "huge", "--min-count", "2", "--wait", "60")
    assert result.exit_code == 1
    assert result.output.count("ERROR (InstanceErrored): boot ") == 2, result.output
    assert "big-1" in result.output and "big-2" in result.output  # both rows rendered
