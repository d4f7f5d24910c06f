"""A flavor after create (issue 15): show, delete (soft, as Nova: a deleted flavor's
servers keep their copy), extra specs set and unset with Nova's validation, private
flavors and their project access; through the API and the ``novaq`` command, and bad
input refused with nothing written."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import select

from models import Flavor
from models.db import session_scope
from novaq.cli import main
from novaq.exceptions import FlavorExists, FlavorNotFound, InvalidFlavor, InvalidInput
from tests.unit.cli import novaq_json as _run
from tests.unit.cli import refused as _refused
from tests.unit.workflows.bad_input import make_world, state
from tests.unit.workflows.servers import delete_and_wait
from workflows import api
from workflows.api import flavors
from workflows.api.flavors import (
    FlavorAccessExists,
    FlavorAccessNotFound,
    FlavorExtraSpecsNotFound,
    FlavorIsPublic,
)

# -- show -------------------------------------------------------------------------------------


def test_show_finds_a_flavor_by_name_or_id(db_url: str) -> None:
    created = api.create_flavor("m1", 2, 1024, 10, extra_specs={"hw:cpu_policy": "shared"})
    by_name = api.show_flavor("m1")
    assert by_name == api.show_flavor(created["id"]) == created
    assert (by_name["vcpus"], by_name["is_public"]) == (2, True)
    assert by_name["extra_specs"] == {"hw:cpu_policy": "shared"}
    assert _run("flavor-show", "m1") == created
    table = CliRunner().invoke(main, ["flavor-show", created["id"]])
    assert table.exit_code == 0 and "hw:cpu_policy" in table.output, table.output


def test_show_of_an_unknown_flavor_is_one_error_line(db_url: str) -> None:
    with pytest.raises(FlavorNotFound, match="nope"):
        api.show_flavor("nope")
    assert "ERROR (FlavorNotFound): Flavor nope could not be found." in _refused(
        "flavor-show", "nope"
    )
    with pytest.raises(InvalidInput, match="flavor must be a non-empty string"):
        api.show_flavor(3)


# -- delete -----------------------------------------------------------------------------------


def test_delete_hides_the_flavor_and_frees_its_name(db_url: str) -> None:
    first = api.create_flavor("m1", 1, 512, 1)
    assert api.delete_flavor("m1")["id"] == first["id"]
    assert api.list_flavors() == []
    with pytest.raises(FlavorNotFound):
        api.show_flavor(first["id"])
    with pytest.raises(FlavorNotFound):
        api.delete_flavor("m1")
    second = api.create_flavor("m1", 2, 512, 1)  # the name is free again
    assert [f["id"] for f in api.list_flavors()] == [second["id"]]
    with session_scope(db_url) as session:  # soft: the old row is kept, marked deleted
        rows = session.scalars(select(Flavor).order_by(Flavor.id)).all()
        assert [(r.name, r.deleted == r.id, r.deleted_at is not None) for r in rows] == [
            ("m1", True, True),
            ("m1", False, False),
        ]
    with pytest.raises(FlavorExists):
        api.create_flavor("m1", 3, 512, 1)


def test_delete_through_the_command(db_url: str) -> None:
    flavor = api.create_flavor("m1", 1, 512, 1)
    result = CliRunner().invoke(main, ["flavor-delete", flavor["id"]])
    assert result.exit_code == 0, result.output
    assert f"Deleted flavor m1 ({flavor['id']})" in result.output
    assert "FlavorNotFound" in _refused("flavor-delete", "m1")


def test_a_flavor_in_use_is_deleted_and_its_server_keeps_its_copy(db_url: str) -> None:
    world = make_world(db_url)  # a server built with flavor "test.2"
    before = api.show(world["uuid"])["flavor"]
    api.delete_flavor("test.2")
    assert api.show(world["uuid"])["flavor"] == before
    with pytest.raises(FlavorNotFound):
        api.boot("vm2", "test.2", "cirros")


# -- extra specs ------------------------------------------------------------------------------


def test_key_set_adds_and_changes_specs_then_unset_removes_them(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1, extra_specs={"hw:cpu_policy": "shared"})
    view = api.set_flavor_extra_specs(
        "m1", {"hw:cpu_policy": "dedicated", "quota:cpu_shares": 2048, "color": "blue"}
    )
    assert view["extra_specs"] == {
        "hw:cpu_policy": "dedicated",
        "quota:cpu_shares": "2048",
        "color": "blue",
    }
    view = api.unset_flavor_extra_specs("m1", ["color", "hw:cpu_policy"])
    assert view["extra_specs"] == {"quota:cpu_shares": "2048"}
    assert api.show_flavor("m1")["extra_specs"] == {"quota:cpu_shares": "2048"}


def test_flavor_key_command_sets_and_unsets(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1)
    view = _run("flavor-key", "m1", "set", "hw:mem_page_size=large", "ssd=true")
    assert view["extra_specs"] == {"hw:mem_page_size": "large", "ssd": "true"}
    view = _run("flavor-key", "m1", "unset", "ssd")
    assert view["extra_specs"] == {"hw:mem_page_size": "large"}
    bad = CliRunner().invoke(main, ["flavor-key", "m1", "set", "novalue"])
    assert bad.exit_code == 2 and "is not KEY=VALUE" in bad.output, bad.output
    assert api.show_flavor("m1")["extra_specs"] == {"hw:mem_page_size": "large"}


@pytest.mark.parametrize(
    ("specs", "error", "words"),
    [
        ({"hw:cpu_polcy": "dedicated"}, InvalidFlavor, "hw:cpu_polcy"),
        ({"resources:VCPUS": "2"}, InvalidFlavor, "resources:VCPUS"),
        ({"capabilities:vcpus": ">= "}, InvalidFlavor, "capabilities:vcpus"),
        ({"pci_passthrough:alias": "nosuch:1"}, InvalidFlavor, "nosuch"),
        # Nova's pattern [^:]+:\d+(?:\s*,\s*[^:]+:\d+)*: no space around a count.
        ({"pci_passthrough:alias": "gpu: 1"}, InvalidFlavor, "pci_passthrough:alias"),
        ({"pci_passthrough:alias": "gpu:1 "}, InvalidFlavor, "pci_passthrough:alias"),
        ({"ok": "1", "hw:nope": "1"}, InvalidFlavor, "hw:nope"),
        ({"": "x"}, InvalidInput, "extra spec"),
        ({"k": "x" * 256}, InvalidInput, "extra spec k"),
        ({"k": True}, InvalidInput, "extra spec k must be a string"),
        ({}, InvalidInput, "non-empty"),
    ],
)
def test_key_set_refuses_an_invalid_spec_and_writes_nothing(
    db_url: str, specs: dict[str, Any], error: type[Exception], words: str
) -> None:
    api.create_flavor("m1", 1, 512, 1, extra_specs={"hw:cpu_policy": "shared"})
    before = state(db_url), api.show_flavor("m1")
    with pytest.raises(error, match=words):
        api.set_flavor_extra_specs("m1", specs)
    assert (state(db_url), api.show_flavor("m1")) == before


def test_key_commands_refuse_bad_input_and_write_nothing(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1, extra_specs={"hw:cpu_policy": "shared"})
    before = state(db_url), api.show_flavor("m1")
    assert "hw:cpu_polcy" in _refused("flavor-key", "m1", "set", "hw:cpu_polcy=dedicated")
    assert "FlavorNotFound" in _refused("flavor-key", "m9", "set", "a=b")
    assert "has no extra specs with key nope" in _refused(
        "flavor-key", "m1", "unset", "hw:cpu_policy", "nope"
    )
    assert (state(db_url), api.show_flavor("m1")) == before


def test_unset_of_a_key_not_set_removes_nothing(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1, extra_specs={"a": "1", "b": "2"})
    with pytest.raises(FlavorExtraSpecsNotFound, match="has no extra specs with key c"):
        api.unset_flavor_extra_specs("m1", ["a", "c"])
    with pytest.raises(InvalidInput, match="non-empty"):
        api.unset_flavor_extra_specs("m1", [])
    with pytest.raises(InvalidInput, match="keys must be a list"):
        api.unset_flavor_extra_specs("m1", "a")
    assert api.show_flavor("m1")["extra_specs"] == {"a": "1", "b": "2"}


def test_a_server_keeps_the_specs_it_was_built_with(db_url: str) -> None:
    world = make_world(db_url)
    api.set_flavor_extra_specs("test.2", {"hw:cpu_policy": "dedicated"})
    assert api.show(world["uuid"])["flavor"]["extra_specs"] == {}


# -- private flavors and access ---------------------------------------------------------------


def test_a_private_flavor_and_its_project_access(db_url: str) -> None:
    flavor = api.create_flavor("gold", 4, 4096, 20, is_public=False)
    assert flavor["is_public"] is False
    assert api.list_flavor_access("gold") == []
    assert api.add_flavor_access("gold", "proj-a") == [
        {"flavor_id": flavor["id"], "tenant_id": "proj-a"}
    ]
    api.add_flavor_access(flavor["id"], "proj-b")
    assert [a["tenant_id"] for a in api.list_flavor_access("gold")] == ["proj-a", "proj-b"]
    assert [a["tenant_id"] for a in api.remove_flavor_access("gold", "proj-a")] == ["proj-b"]


def test_the_list_shows_public_flavors_and_every_one_with_all(db_url: str) -> None:
    public = api.create_flavor("m1", 1, 512, 1)
    private = api.create_flavor("gold", 4, 4096, 20, is_public=False)
    assert api.list_flavors() == [public]  # as nova flavor-list
    assert api.list_flavors(is_public=None) == [public, private]  # as nova flavor-list --all
    assert api.list_flavors(is_public=False) == [private]
    assert _run("flavor-list") == [public]
    assert _run("flavor-list", "--all") == [public, private]
    with pytest.raises(InvalidInput, match="is_public"):
        api.list_flavors(is_public="yes")


def test_access_decides_which_project_may_use_a_private_flavor(db_url: str) -> None:
    api.create_flavor("gold", 4, 4096, 20, is_public=False)
    api.create_flavor("m1", 1, 512, 1)
    api.add_flavor_access("gold", "proj-a")
    with session_scope(db_url) as session:
        assert flavors.get_flavor(session, "gold", project="proj-a").name == "gold"
        assert flavors.get_flavor(session, "gold").name == "gold"  # the operator
        assert flavors.get_flavor(session, "m1", project="proj-b").name == "m1"
        with pytest.raises(FlavorNotFound, match="gold"):
            flavors.get_flavor(session, "gold", project="proj-b")


def test_flavor_access_commands(db_url: str) -> None:
    created = _run(
        "flavor-create", "gold", "--vcpus", "1", "--ram", "512", "--disk", "1", "--private"
    )
    assert created["is_public"] is False
    assert _run("flavor-access-add", "gold", "proj-a") == [
        {"flavor_id": created["id"], "tenant_id": "proj-a"}
    ]
    assert _run("flavor-access-list", "--flavor", "gold") == [
        {"flavor_id": created["id"], "tenant_id": "proj-a"}
    ]
    table = CliRunner().invoke(main, ["flavor-access-list", "--flavor", "gold"])
    assert table.exit_code == 0 and "proj-a" in table.output, table.output
    assert _run("flavor-access-remove", "gold", "proj-a") == []


def test_bad_access_requests_are_refused_and_change_nothing(db_url: str) -> None:
    api.create_flavor("gold", 1, 512, 1, is_public=False)
    api.create_flavor("m1", 1, 512, 1)
    api.add_flavor_access("gold", "proj-a")
    before = state(db_url), api.list_flavor_access("gold")
    with pytest.raises(FlavorAccessExists, match="already exists for flavor"):
        api.add_flavor_access("gold", "proj-a")
    with pytest.raises(FlavorAccessNotFound, match="proj-b"):
        api.remove_flavor_access("gold", "proj-b")
    with pytest.raises(FlavorIsPublic, match="can not add access to a public flavor"):
        api.add_flavor_access("m1", "proj-a")
    with pytest.raises(FlavorIsPublic, match="access list not available"):
        api.list_flavor_access("m1")
    with pytest.raises(FlavorNotFound):
        api.add_flavor_access("nope", "proj-a")
    with pytest.raises(InvalidInput, match="project must be a non-empty string"):
        api.add_flavor_access("gold", "  ")
    with pytest.raises(InvalidInput, match="project must be"):
        api.add_flavor_access("gold", "p\x1b")
    assert "FlavorAccessExists" in _refused("flavor-access-add", "gold", "proj-a")
    assert "FlavorAccessNotFound" in _refused("flavor-access-remove", "gold", "proj-z")
    assert "FlavorIsPublic" in _refused("flavor-access-list", "--flavor", "m1")
    assert (state(db_url), api.list_flavor_access("gold")) == before


def test_boot_by_a_project_without_access_to_a_private_flavor_writes_nothing(
    db_url: str,
) -> None:
    world = make_world(db_url)
    api.create_flavor("gold", 1, 512, 1, is_public=False)
    api.add_flavor_access("gold", "proj-a")
    before = state(db_url)
    with pytest.raises(FlavorNotFound, match="gold"):
        api.boot("vm", "gold", "cirros", project="proj-b")
    with pytest.raises(InvalidInput, match="project must be a non-empty string"):
        api.boot("vm", "gold", "cirros", project=" ")
    assert state(db_url) == before
    assert api.show(world["uuid"])["status"] == "ACTIVE"


def test_boot_with_a_private_flavor_by_a_project_with_access_and_by_the_operator(
    db_url: str, worker: None
) -> None:
    api.create_flavor("gold", 1, 512, 1, is_public=False)
    api.add_flavor_access("gold", "proj-a")
    [mine] = api.boot("vm-a", "gold", "cirros", project="proj-a")
    assert api.wait(mine, "ACTIVE", timeout=30)["flavor"]["name"] == "gold"
    delete_and_wait(mine)
    [operators] = api.boot("vm-op", "gold", "cirros")
    assert api.wait(operators, "ACTIVE", timeout=30)["flavor"]["name"] == "gold"
    delete_and_wait(operators)
