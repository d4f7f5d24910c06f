"""Every instance action records its end (issue 15, "everywhere"): each verb's action has a
``finish_time`` once its operation ended, success or failure, through a real worker."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import pytest

from novaq.exceptions import FlavorExists, OperationFailed
from novaq.settings import get_settings
from tasks import context
from tests.unit.workflows.servers import boot_active, delete_and_wait
from workflows import api


def _action(uuid: str, request_id: str) -> dict[str, Any]:
    [action] = [a for a in api.list_actions(uuid) if a["request_id"] == request_id]
    return action


def _ended(uuid: str, request_id: str, status: str) -> dict[str, Any]:
    """Wait for the request's end and return its action."""
    api.wait(uuid, status, timeout=30, request_id=request_id)
    return _action(uuid, request_id)


#: (verb, the call, the status it ends in), in an order each can follow the one before.
VERBS: list[tuple[str, Callable[[str], Any], str]] = [
    ("stop", api.stop, "SHUTOFF"),
    ("start", api.start, "ACTIVE"),
    ("reboot", api.reboot, "ACTIVE"),
    ("reboot", lambda uuid: api.reboot(uuid, hard=True), "ACTIVE"),
    ("pause", api.pause, "PAUSED"),
    ("unpause", api.unpause, "ACTIVE"),
    ("suspend", api.suspend, "SUSPENDED"),
    ("resume", api.resume, "ACTIVE"),
    ("rescue", api.rescue, "RESCUE"),
    ("unrescue", api.unrescue, "ACTIVE"),
    ("shelve", api.shelve, "SHELVED_OFFLOADED"),
    ("unshelve", api.unshelve, "ACTIVE"),
]


def test_every_lifecycle_action_records_its_finish_time(db_url: str, worker: None) -> None:
    uuid = boot_active()
    [create] = api.list_actions(uuid)
    assert create["finish_time"] is not None
    for verb, call, status in VERBS:
        action = _ended(uuid, call(uuid), status)
        assert action["action"] == verb
        assert action["finish_time"] is not None, (verb, action)
        assert action["message"] is None, (verb, action)
    # A crash dump changes no status: its end is its action's.
    request_id = api.trigger_crash_dump(uuid)
    deadline = time.monotonic() + 30
    while _action(uuid, request_id)["finish_time"] is None:
        assert time.monotonic() < deadline, _action(uuid, request_id)
        time.sleep(0.1)
    for verb in ("lock", "unlock"):
        getattr(api, verb)(uuid)
        [*_, last] = api.list_actions(uuid)
        assert (last["action"], last["finish_time"] is not None) == (verb, True)
    delete_and_wait(uuid)
    [*_, delete] = api.list_actions(uuid)
    assert delete["action"] == "delete" and delete["finish_time"] is not None


@pytest.fixture
def same_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """host1 may be its own resize destination (the unit tier has one host)."""
    allowed = get_settings().model_copy(update={"allow_resize_to_same_host": True})
    monkeypatch.setattr(context, "settings", lambda: allowed)


def _flavor(name: str, vcpus: int) -> None:
    with contextlib.suppress(FlavorExists):
        api.create_flavor(name, vcpus, 512, 1)


def test_resize_confirm_and_revert_record_their_finish_time(
    db_url: str, worker: None, same_host: None
) -> None:
    uuid = boot_active()
    _flavor("m2", 2)
    _flavor("m3", 3)
    resize = _ended(uuid, api.resize(uuid, "m2"), "VERIFY_RESIZE")
    assert resize["finish_time"] is not None and resize["message"] is None
    confirm = _ended(uuid, api.confirm_resize(uuid), "ACTIVE")
    assert confirm["action"] == "confirmResize" and confirm["finish_time"] is not None
    _ended(uuid, api.resize(uuid, "m3"), "VERIFY_RESIZE")
    revert = _ended(uuid, api.revert_resize(uuid), "ACTIVE")
    assert revert["action"] == "revertResize" and revert["finish_time"] is not None
    assert api.show(uuid)["flavor"]["vcpus"] == 2
    delete_and_wait(uuid)


def test_a_failed_move_records_its_finish_time_with_the_error(db_url: str, worker: None) -> None:
    uuid = boot_active()
    request_id = api.migrate(uuid)  # host1 is the only host: no valid host
    with pytest.raises(OperationFailed):
        api.wait(uuid, "VERIFY_RESIZE", timeout=30, request_id=request_id)
    action = _action(uuid, request_id)
    assert action["finish_time"] is not None and action["message"] == "Error"
    delete_and_wait(uuid)


def test_soft_delete_and_restore_record_their_finish_time(
    db_url: str, worker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workflows.api import common

    reclaiming = get_settings().model_copy(update={"reclaim_instance_interval": 3600})
    monkeypatch.setattr(common, "settings", lambda: reclaiming)
    uuid = boot_active()
    delete = _ended(uuid, api.delete(uuid), "SOFT_DELETED")
    assert delete["action"] == "delete" and delete["finish_time"] is not None
    restore = _ended(uuid, api.restore(uuid), "ACTIVE")
    assert restore["action"] == "restore" and restore["finish_time"] is not None
    monkeypatch.undo()
    delete_and_wait(uuid)
