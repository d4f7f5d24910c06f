"""Deleting a flavor in use, as Nova allows (issue 15): the server was built and moved
through a real (in-thread) worker; its flavor and the resize's new flavor are deleted
under it, and show, resize-revert, a second resize and the accounting audit still work
from the server's own copy of its flavors."""

from __future__ import annotations

import time
from typing import Any

import pytest

from compute.audit import audit_nodes
from models.db import session_scope
from novaq.exceptions import FlavorNotFound
from novaq.settings import get_settings
from tasks import context
from tests.unit.workflows.servers import boot_active, delete_and_wait
from workflows import api


def _migration(uuid: str, status: str, timeout_s: float = 30.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while (migration := api.list_migrations(instance_uuid=uuid)[-1])["status"] != status:
        assert time.monotonic() < deadline, migration
        time.sleep(0.1)
    return migration


def _leaks(db_url: str) -> int:
    with session_scope(db_url) as session:
        return int(audit_nodes(session, {"host1": None})["leaks"])


def test_resize_revert_and_audit_work_after_both_flavors_are_deleted(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    same_host = get_settings().model_copy(update={"allow_resize_to_same_host": True})
    monkeypatch.setattr(context, "settings", lambda: same_host)
    uuid = boot_active(flavor="m1")
    api.create_flavor("m2", 2, 1024, 1)
    api.delete_flavor("m1")
    assert api.show(uuid)["flavor"]["name"] == "m1"

    api.resize(uuid, "m2")
    api.wait(uuid, "VERIFY_RESIZE", timeout=30)
    _migration(uuid, "finished")
    api.delete_flavor("m2")
    assert api.show(uuid)["flavor"]["name"] == "m2"

    api.revert_resize(uuid)
    view = api.wait(uuid, "ACTIVE", timeout=30)
    _migration(uuid, "reverted")
    assert (view["flavor"]["name"], view["flavor"]["vcpus"], view["host"]) == ("m1", 1, "host1")
    assert view["fault"] is None
    assert _leaks(db_url) == 0
    with pytest.raises(FlavorNotFound):
        api.resize(uuid, "m1")  # a deleted flavor is no resize target
    node = api.show_hypervisor("host1")
    assert (node["vcpus_used"], [s["flavor"] for s in node["servers"]]) == (1, ["m1"])

    api.create_flavor("m3", 2, 1024, 1)
    api.resize(uuid, "m3")  # the server moves on from a deleted flavor
    api.wait(uuid, "VERIFY_RESIZE", timeout=30)
    api.confirm_resize(uuid)
    assert api.wait(uuid, "ACTIVE", timeout=30)["flavor"]["name"] == "m3"
    _migration(uuid, "confirmed")
    assert _leaks(db_url) == 0
    delete_and_wait(uuid)
