"""Nova's ``trigger_crash_dump`` on the host (``compute.lifecycle.TRIGGER_CRASH_DUMP``, one
row of the operation table): an NMI into the guest, no state of the instance changed, a
refusal of the hypervisor recorded as a fault, and a redelivered message not sending a
second NMI (no task_state can tell: the request's finished action does)."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from compute import instance_actions as actions
from compute import lifecycle
from compute.instance_state import get_instance
from compute.sessions import sessions_for
from compute.steps import DONE, SKIPPED, StepContext, abort
from models import InstanceAction, InstanceActionEvent, utcnow
from models.db import session_scope
from novaq.exceptions import InstanceNotRunning
from tests.factories import host_resources, make_instance
from virt import power_state
from virt.driver import GuestSpec
from virt.fake import FakeDriver

REQUEST = "req-crash-dump"


def _server(db_url: str, driver: FakeDriver, vm_state: str = "active") -> str:
    """A server with its guest running on host1 and the API's action of ``REQUEST`` open."""
    uuid = make_instance(
        db_url,
        host="host1",
        node="host1",
        vm_state=vm_state,
        task_state=None,
        power_state=power_state.RUNNING,
        launched_at=utcnow(),
    )
    with session_scope(db_url) as session:
        actions.start_action(session, uuid, "trigger_crash_dump", REQUEST)
    driver.spawn(GuestSpec(uuid=uuid, name="instance-00000001", vcpus=1, memory_mb=512, root_gb=1))
    return uuid


def _ctx(db_url: str, driver: FakeDriver) -> StepContext:
    return StepContext(sessions_for(db_url), driver, "host1", REQUEST)


def _state(db_url: str, uuid: str) -> tuple[str, str | None, int]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        return instance.vm_state, instance.task_state, instance.power_state


def _events(db_url: str, uuid: str) -> list[tuple[str, str | None]]:
    with session_scope(db_url) as session:
        rows = session.execute(
            select(InstanceActionEvent.event, InstanceActionEvent.result)
            .join(InstanceAction, InstanceAction.id == InstanceActionEvent.action_id)
            .where(InstanceAction.instance_uuid == uuid, InstanceAction.request_id == REQUEST)
        ).all()
        return [(event, result) for event, result in rows]


def test_an_nmi_reaches_the_guest_and_nothing_else_changes(db_url: str) -> None:
    driver = FakeDriver(host_resources())
    uuid = _server(db_url, driver, vm_state="paused")

    assert lifecycle.trigger_crash_dump(_ctx(db_url, driver), uuid) == DONE

    assert driver.nmis == [uuid]
    assert _state(db_url, uuid) == ("paused", None, power_state.RUNNING)
    assert _events(db_url, uuid) == [("compute_trigger_crash_dump", "Success")]


def test_a_redelivered_message_sends_no_second_nmi(db_url: str) -> None:
    driver = FakeDriver(host_resources())
    uuid = _server(db_url, driver)
    lifecycle.trigger_crash_dump(_ctx(db_url, driver), uuid)

    assert lifecycle.trigger_crash_dump(_ctx(db_url, driver), uuid) == SKIPPED
    assert driver.nmis == [uuid]


def test_a_guest_that_is_not_running_leaves_a_fault_and_the_state_as_it_was(
    db_url: str,
) -> None:
    driver = FakeDriver(host_resources())
    uuid = _server(db_url, driver)
    driver.power_off(uuid)  # the guest went down; the instance still says ACTIVE

    with pytest.raises(InstanceNotRunning):
        lifecycle.trigger_crash_dump(_ctx(db_url, driver), uuid)

    assert driver.nmis == []
    assert _state(db_url, uuid) == ("active", None, power_state.RUNNING)
    assert _events(db_url, uuid) == [("compute_trigger_crash_dump", "Error")]
    with session_scope(db_url) as session:
        fault = actions.latest_fault(session, uuid)
        assert fault is not None and f"Instance {uuid} is not running." in fault.message


def test_the_errback_records_a_step_that_never_ran_once(db_url: str) -> None:
    driver = FakeDriver(host_resources())
    uuid = _server(db_url, driver)
    lost = RuntimeError("delivered too many times")

    def aborted() -> bool:
        return abort(
            sessions_for(db_url), lifecycle.TRIGGER_CRASH_DUMP, uuid, REQUEST, "host1", lost
        )

    assert aborted() is True
    assert aborted() is False  # the action is closed now: nothing left to undo
    assert _state(db_url, uuid) == ("active", None, power_state.RUNNING)
    assert _events(db_url, uuid) == [("compute_trigger_crash_dump", "Error")]
