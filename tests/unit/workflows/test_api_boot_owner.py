"""A server's owner and os_type: ``boot(project=..., user=...)`` (the demo project and
user by default), carried to the scheduler in the request spec, shown as Nova's API shows
them (``tenant_id``, ``user_id``), taken by the ``novaq boot`` command; the image's
``os_type`` recorded at boot and at rebuild."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from compute.instance_state import get_instance
from models import Instance
from models.db import session_scope
from novaq.exceptions import InvalidInput
from novaq.settings import get_settings
from scheduler.request_spec import RequestSpec
from tests.factories import CIRROS_ID, flavor_dict, make_image
from tests.unit.cli import novaq_json
from tests.unit.workflows.bad_input import state
from tests.unit.workflows.servers import clear_queues, placed_server
from workflows import api


@pytest.fixture(autouse=True)
def _flavor(db_url: str) -> Iterator[None]:
    api.create_flavor("m1", 1, 512, 1)
    yield
    clear_queues("scheduler", "compute.host1")


def _row(db_url: str, uuid: str) -> tuple[Instance, RequestSpec]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        session.expunge(instance)
    return instance, RequestSpec.from_dict(instance.request_spec)


def test_a_server_belongs_to_the_project_and_user_that_booted_it(db_url: str) -> None:
    [uuid] = api.boot("vm", "m1", "cirros", project="proj-a", user="alice")
    instance, spec = _row(db_url, uuid)
    assert (instance.project_id, instance.user_id) == ("proj-a", "alice")
    assert (spec.project_id, spec.user_id) == ("proj-a", "alice")
    shown = api.show(uuid)
    assert (shown["tenant_id"], shown["user_id"]) == ("proj-a", "alice")
    [listed] = api.list_instances()
    assert (listed["tenant_id"], listed["user_id"]) == ("proj-a", "alice")


def test_a_server_booted_without_an_owner_belongs_to_the_demo_project_and_user(
    db_url: str,
) -> None:
    uuids = api.boot("vm", "m1", "cirros", count=2)
    for uuid in uuids:
        instance, spec = _row(db_url, uuid)
        assert (instance.project_id, instance.user_id) == ("demo", "demo")
        assert (spec.project_id, spec.user_id) == ("demo", "demo")


def test_a_stored_spec_without_an_owner_reads_as_the_demo_one() -> None:
    spec = RequestSpec.from_dict({"instance_uuid": "u", "flavor": flavor_dict()})
    assert (spec.project_id, spec.user_id) == ("demo", "demo")
    again = RequestSpec.from_dict(
        RequestSpec.from_dict({**spec.to_dict(), "project_id": "p", "user_id": "u"}).to_dict()
    )
    assert (again.project_id, again.user_id) == ("p", "u")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"user": " "}, "user must be a non-empty string"),
        ({"project": ""}, "project"),
        ({"user": 7}, "user"),
    ],
)
def test_a_bad_owner_is_refused_and_nothing_is_written(
    db_url: str, extra: dict[str, Any], message: str
) -> None:
    before = state(db_url)
    with pytest.raises(InvalidInput, match=message):
        api.boot("vm", "m1", "cirros", **extra)
    assert state(db_url) == before


def test_the_boot_command_takes_the_project_and_user(db_url: str) -> None:
    [row] = novaq_json("boot", "vm", "--flavor", "m1", "--project", "p1", "--user", "bob")
    assert (row["tenant_id"], row["user_id"]) == ("p1", "bob")
    shown = novaq_json("show", row["uuid"])
    assert (shown["tenant_id"], shown["user_id"]) == ("p1", "bob")


def test_the_server_keeps_the_image_os_type_as_nova_does(db_url: str) -> None:
    data = get_settings().image_store_path / CIRROS_ID
    make_image(db_url, data, name="win", properties={"os_type": "windows"})
    [windows] = api.boot("vm", "m1", "win")
    [plain] = api.boot("vm", "m1", "cirros")
    assert _row(db_url, windows)[0].os_type == "windows"
    assert _row(db_url, plain)[0].os_type is None


def test_a_rebuild_takes_the_new_image_os_type_as_nova_does(db_url: str) -> None:
    data = get_settings().image_store_path / CIRROS_ID
    make_image(db_url, data, name="lin", properties={"os_type": "linux"})
    uuid = placed_server(db_url)
    api.rebuild(uuid, "lin")
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).os_type == "linux"
