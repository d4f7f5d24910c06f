"""The errbacks the API links to host steps (lifecycle, soft delete, shelve), called as
Celery calls them (the failed task's request, the exception) on real SQLite rows: each
undoes its step as the step's own failure path would, once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from compute.instance_actions import latest_fault
from compute.instance_state import get_instance
from models.db import session_scope
from novaq.exceptions import HypervisorError
from tasks.lifecycle import on_lifecycle_error
from tasks.shelve import on_shelve_error
from tasks.soft_delete import on_soft_delete_error
from tests.factories import make_instance

REQUEST = "req-step"
ERROR = HypervisorError(reason="delivered too often")


def _request(task: str, uuid: str | None, **kwargs: Any) -> SimpleNamespace:
    named = {"instance_uuid": uuid} if uuid else {}
    return SimpleNamespace(
        task=task, kwargs={**named, "request_id": REQUEST, "host": "host1", **kwargs}
    )


def _state(db_url: str, uuid: str) -> tuple[str, str | None, str | None]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        fault = latest_fault(session, uuid)
        return instance.vm_state, instance.task_state, fault and fault.message


@pytest.mark.parametrize(
    ("errback", "task", "vm_state", "task_state", "kwargs", "vm_after"),
    [
        (on_lifecycle_error, "compute.stop_instance", "active", "powering-off", {}, "active"),
        # a hard reboot's failure puts the server in ERROR, as the step's own would
        (
            on_lifecycle_error,
            "compute.reboot_instance",
            "active",
            "rebooting_hard",
            {"hard": True},
            "error",
        ),
        (
            on_soft_delete_error,
            "compute.soft_delete_instance",
            "active",
            "soft-deleting",
            {},
            "active",
        ),
        (
            on_shelve_error,
            "compute.shelve_offload_instance",
            "shelved",
            "shelving_offloading",
            {},
            "shelved",
        ),
    ],
)
def test_an_errback_undoes_its_step_once_with_a_fault(
    db_url: str,
    errback: Any,
    task: str,
    vm_state: str,
    task_state: str,
    kwargs: dict[str, Any],
    vm_after: str,
) -> None:
    uuid = make_instance(
        db_url, host="host1", node="host1", vm_state=vm_state, task_state=task_state
    )
    errback(_request(task, uuid, **kwargs), ERROR, None)
    assert _state(db_url, uuid) == (vm_after, None, "Hypervisor error: delivered too often")
    errback(_request(task, uuid, **kwargs), HypervisorError(reason="again"), None)
    assert _state(db_url, uuid)[2] == "Hypervisor error: delivered too often"  # no-op


def test_an_errback_leaves_other_tasks_and_requests_without_an_instance_alone(
    db_url: str,
) -> None:
    uuid = make_instance(db_url, host="host1", node="host1", task_state="soft-deleting")
    on_lifecycle_error(_request("compute.soft_delete_instance", uuid), ERROR, None)
    on_shelve_error(_request("compute.soft_delete_instance", uuid), ERROR, None)
    on_soft_delete_error(_request("compute.soft_delete_instance", None), ERROR, None)
    assert _state(db_url, uuid)[1:] == ("soft-deleting", None)
