"""The public API: input checks that write and enqueue nothing, and a whole boot/delete
through a real (in-thread) Celery worker on the in-memory broker and libvirt test:///."""

from __future__ import annotations

import re
from typing import Any

import pytest
from sqlalchemy import func, select

from models import Flavor, Instance, InstanceAction
from models.db import session_scope
from novaq.exceptions import (
    FlavorExists,
    FlavorNotFound,
    InstanceNotFound,
    InvalidInput,
    ServiceUnavailable,
)
from tasks import app
from tests.unit.workflows.servers import queued
from workflows import api
from workflows.api import common as api_common


def _count(db_url: str, model: Any) -> int:
    with session_scope(db_url) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"vcpus": 0}, "vcpus must be >= 1"),
        ({"vcpus": -2}, "vcpus must be >= 1"),
        ({"memory_mb": 0}, "memory_mb must be >= 1"),
        ({"root_gb": -1}, "root_gb must be >= 0"),
        ({"vcpus": "2"}, "vcpus must be an integer"),
        ({"vcpus": True}, "vcpus must be an integer"),
        ({"name": 42}, "flavor name must be a non-empty string"),
        ({"name": ""}, "flavor name must be a non-empty string"),
        ({"extra_specs": ["a"]}, "extra_specs must be a mapping"),
    ],
)
def test_create_flavor_refuses_bad_input_and_writes_nothing(
    db_url: str, kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"name": "m1", "vcpus": 1, "memory_mb": 512, "root_gb": 1}
    args.update(kwargs)
    with pytest.raises(InvalidInput, match=message):
        api.create_flavor(**args)
    assert _count(db_url, Flavor) == 0


def test_create_flavor_twice_is_refused(db_url: str) -> None:
    api.create_flavor("m1", 1, 512, 1, extra_specs={"hw:cpu_policy": "shared"})
    with pytest.raises(FlavorExists):
        api.create_flavor("m1", 2, 512, 1)
    [flavor] = api.list_flavors()
    assert flavor["extra_specs"] == {"hw:cpu_policy": "shared"}
    assert flavor["vcpus"] == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"flavor": "nope"}, FlavorNotFound),
        ({"name": 7}, InvalidInput),
        ({"image": None}, InvalidInput),
        ({"count": 0}, InvalidInput),
        ({"hints": "same_host"}, InvalidInput),
    ],
)
def test_boot_refuses_bad_input_before_writing_or_enqueuing(
    db_url: str, kwargs: dict[str, Any], error: type[Exception]
) -> None:
    api.create_flavor("m1", 1, 512, 1)
    args: dict[str, Any] = {"name": "vm", "flavor": "m1", "image": "cirros"}
    args.update(kwargs)
    before = queued("scheduler")
    with pytest.raises(error):
        api.boot(**args)
    assert _count(db_url, Instance) == 0
    assert _count(db_url, InstanceAction) == 0
    assert queued("scheduler") == before


def test_unknown_instances_are_not_found(db_url: str) -> None:
    missing = "00000000-0000-0000-0000-000000000000"
    for call in (api.show, api.delete, api.diagnostics, api.list_actions):
        with pytest.raises(InstanceNotFound):
            call(missing)
    with pytest.raises(InstanceNotFound):
        api.show("not-a-uuid")
    with pytest.raises(InvalidInput):
        api.show(12)  # type: ignore[arg-type]


def test_boot_with_the_broker_down_changes_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.create_flavor("m1", 1, 512, 1)
    monkeypatch.setitem(app.conf, "broker_url", "redis://127.0.0.1:1/0")
    monkeypatch.setitem(app.conf, "broker_write_url", "redis://127.0.0.1:1/0")
    with pytest.raises(ServiceUnavailable, match="message broker"):
        api.boot("vm", "m1", "cirros")
    assert _count(db_url, Instance) == 0


def test_boot_with_the_database_down_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from novaq import settings as settings_module

    broken = settings_module.load_settings(database_url="postgresql://nobody@127.0.0.1:1/none")
    monkeypatch.setattr(api_common, "settings", lambda: broken)
    with pytest.raises(ServiceUnavailable, match="database"):
        api.list_flavors()


def test_boot_then_delete_through_a_worker(db_url: str, worker: None) -> None:
    api.create_flavor("m1.small", 1, 2048, 10)
    uuids = api.boot("web", "m1.small", "cirros", count=2)
    for uuid in uuids:
        view = api.wait(uuid, "ACTIVE", timeout=30)
        assert view["host"] == "host1" and view["power_state"] == 1
        assert view["launched_at"] is not None
        diag = api.diagnostics(uuid)
        assert (
            diag["power_state"] == 1
            and diag["power_state_name"] == "running"
            and diag["memory_mb"] == 2048
        )
        assert f"<uuid>{uuid}</uuid>" in diag["xml"]
    [host] = api.list_hosts()
    assert (host["vcpus_used"], host["memory_mb_used"], host["local_gb_used"]) == (
        2,
        512 + 4096,
        20,
    )
    assert {s["binary"] for s in api.list_services()} == {"novaq-compute", "novaq-scheduler"}
    [action] = api.list_actions(uuids[0])
    assert action["action"] == "create" and action["finish_time"] is not None
    assert [e["result"] for e in action["events"]] == ["Success"]

    for uuid in uuids:
        api.delete(uuid)
    for uuid in uuids:
        assert api.wait(uuid, "DELETED", timeout=30)["vm_state"] == "deleted"
    [host] = api.list_hosts()
    assert (host["vcpus_used"], host["memory_mb_used"], host["local_gb_used"]) == (0, 512, 0)
    assert api.list_instances() == []
    assert len(api.list_instances(deleted=True)) == 2


def test_boot_too_big_for_any_host_errors_with_no_valid_host(db_url: str, worker: None) -> None:
    api.create_flavor("huge", 1, 10**6, 10)
    [uuid] = api.boot("big", "huge", "cirros")
    view = api.wait(uuid, "ERROR", timeout=30)
    assert view["fault"]["message"].startswith("No valid host was found.")
    assert view["host"] is None
    [host] = api.list_hosts()
    assert host["memory_mb_used"] == 512
    [action] = api.list_actions(uuid)
    assert action["events"][0]["event"] == "conductor_schedule_and_build_instances"
    assert action["events"][0]["result"] == "Error"
    api.delete(uuid)
    assert api.show(uuid)["status"] == "DELETED"


def test_a_flavor_asking_for_an_unknown_pci_alias_is_refused(db_url: str) -> None:
    with pytest.raises(InvalidInput, match="PCI alias 'gpu' is not defined"):
        api.create_flavor("g", 1, 512, 1, extra_specs={"pci_passthrough:alias": "gpu:1"})
    assert _count(db_url, Flavor) == 0


def _until_the_worker_is_idle(timeout_s: float = 30.0) -> None:
    """Every step the in-thread worker took has returned, its ``after_return`` included.

    NOTE: a step forgets its delivery in ``after_return``, which Celery runs after the
    step's own transactions: the instance reads DELETED a moment before the last step's
    delivery row goes (issue 15, defect 6). Waiting for DELETED alone raced that.
    """
    import time

    from celery.worker import state

    deadline = time.monotonic() + timeout_s
    while state.active_requests or state.reserved_requests:
        assert time.monotonic() < deadline, f"still running: {state.active_requests}"
        time.sleep(0.02)


def test_every_finished_step_forgets_its_delivery_count(db_url: str, worker: None) -> None:
    from models import TaskDelivery

    api.create_flavor("m1", 1, 512, 1)
    [uuid] = api.boot("vm", "m1", "cirros")
    api.wait(uuid, "ACTIVE", timeout=30)
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)
    _until_the_worker_is_idle()
    assert _count(db_url, TaskDelivery) == 0


def test_a_step_delivered_past_the_limit_is_given_up_and_compensated(
    db_url: str, worker: None
) -> None:
    from models import TaskDelivery
    from tasks.compute import build_and_run_instance
    from tasks.errbacks import on_build_error
    from tests.factories import make_instance

    uuid = make_instance(db_url, host="host1", node="host1")
    with session_scope(db_url) as session:
        session.add(
            TaskDelivery(task_id="poison", task_name="compute.build_and_run_instance", attempts=5)
        )
    signature = build_and_run_instance.si(
        instance_uuid=uuid, request_id="req-test", host="host1", node="host1"
    )
    signature.on_error(on_build_error.s())
    signature.apply_async(task_id="poison")
    view = api.wait(uuid, "ERROR", timeout=30)
    assert re.search(r"delivered [67] times \(limit 5\); giving up", view["fault"]["message"])
