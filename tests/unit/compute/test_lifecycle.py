"""Power and lifecycle steps on a compute host, on the in-memory driver: state sequences,
redelivery, and Nova's outcome of each failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from compute import lifecycle, steps
from compute.instance_actions import latest_fault
from compute.instance_state import cas_update, get_instance
from compute.sessions import sessions_for
from compute.steps import StepContext
from models import InstanceAction, utcnow
from models.db import session_scope
from novaq.exceptions import HypervisorError
from tests.factories import host_resources, make_instance
from virt import power_state
from virt.driver import ComputeDriver, GuestInfo, GuestSpec, ImageSpec
from virt.fake import FakeDriver

REQUEST = "req-life"


class FailingDriver(FakeDriver):
    """Fails the named operations with ``error`` (a HypervisorError by default)."""

    def __init__(self, *failing: str, error: type[Exception] | None = None) -> None:
        super().__init__(host_resources("host1"))
        self.failing = set(failing)
        self.error = error

    def _maybe_fail(self, name: str, uuid: str) -> None:
        if name in self.failing:
            if self.error is None:
                raise HypervisorError(reason=f"simulated {name} failure of {uuid}")
            raise self.error(f"{name} is not implemented")

    def power_off(self, uuid: str, timeout_s: float = 0) -> None:
        self._maybe_fail("power_off", uuid)
        super().power_off(uuid, timeout_s)

    def power_on(self, uuid: str) -> None:
        self._maybe_fail("power_on", uuid)
        super().power_on(uuid)

    def reboot(self, spec: GuestSpec, hard: bool) -> None:
        self._maybe_fail("reboot", spec.uuid)
        super().reboot(spec, hard)

    def pause(self, uuid: str) -> None:
        self._maybe_fail("pause", uuid)
        super().pause(uuid)

    def suspend(self, uuid: str) -> None:
        self._maybe_fail("suspend", uuid)
        super().suspend(uuid)

    def resume(self, uuid: str) -> None:
        self._maybe_fail("resume", uuid)
        super().resume(uuid)

    def rescue(self, spec: GuestSpec, rescue_image: ImageSpec | None) -> GuestInfo:
        self._maybe_fail("rescue", spec.uuid)
        return super().rescue(spec, rescue_image)

    def unrescue(self, uuid: str) -> GuestInfo:
        self._maybe_fail("unrescue", uuid)
        return super().unrescue(uuid)


class HookedDriver(FakeDriver):
    """Runs ``hook(uuid)`` inside every power call, to watch or race the step."""

    def __init__(self, hook: Callable[[str], None]) -> None:
        super().__init__(host_resources("host1"))
        self.hook = hook

    def power_off(self, uuid: str, timeout_s: float = 0) -> None:
        self.hook(uuid)
        super().power_off(uuid, timeout_s)

    def reboot(self, spec: GuestSpec, hard: bool) -> None:
        self.hook(spec.uuid)
        super().reboot(spec, hard)


def _ctx(db_url: str, driver: ComputeDriver, host: str = "host1") -> StepContext:
    return StepContext(sessions_for(db_url), driver, host, REQUEST)


def _server(db_url: str, driver: FakeDriver, vm_state: str, task_state: str | None) -> str:
    """A launched instance on host1 whose guest runs (then put in the power state that
    matches ``vm_state``), with an action for ``REQUEST``."""
    uuid = make_instance(
        db_url,
        host="host1",
        node="host1",
        vm_state=vm_state,
        task_state=task_state,
        power_state=power_state.RUNNING,
        launched_at=utcnow(),
        request_id=REQUEST,
    )
    spec = GuestSpec(uuid=uuid, name="instance-00000001", vcpus=1, memory_mb=512, root_gb=1)
    driver.spawn(spec)
    if vm_state == "rescued":
        driver.rescue(spec, None)
    elif vm_state == "stopped":
        driver.power_off(uuid)
    elif vm_state == "paused":
        driver.pause(uuid)
    elif vm_state == "suspended":
        driver.suspend(uuid)
    return uuid


def _state(db_url: str, uuid: str) -> tuple[str, str | None, int]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        return instance.vm_state, instance.task_state, instance.power_state


def _sysmeta(db_url: str, uuid: str) -> dict[str, Any]:
    with session_scope(db_url) as session:
        return dict(get_instance(session, uuid).system_metadata)


def _events(db_url: str, uuid: str) -> list[tuple[str, str | None]]:
    with session_scope(db_url) as session:
        action = session.scalars(
            select(InstanceAction).where(InstanceAction.instance_uuid == uuid)
        ).one()
        return [(e.event, e.result) for e in action.events]


def _fault(db_url: str, uuid: str) -> tuple[int, str] | None:
    with session_scope(db_url) as session:
        fault = latest_fault(session, uuid)
        return None if fault is None else (fault.code, fault.message)


Step = Callable[..., str]

SUCCESSES = [
    # step, vm_state before, task set by the API, vm after, power after
    (lifecycle.stop_instance, "active", "powering-off", "stopped", power_state.SHUTDOWN),
    (lifecycle.stop_instance, "error", "powering-off", "stopped", power_state.SHUTDOWN),
    (lifecycle.start_instance, "stopped", "powering-on", "active", power_state.RUNNING),
    (lifecycle.pause_instance, "active", "pausing", "paused", power_state.PAUSED),
    (lifecycle.unpause_instance, "paused", "unpausing", "active", power_state.RUNNING),
    (lifecycle.suspend_instance, "active", "suspending", "suspended", power_state.SHUTDOWN),
    (lifecycle.resume_instance, "suspended", "resuming", "active", power_state.RUNNING),
    # A rescued guest runs its rescue image, as Nova's libvirt rescue leaves it.
    (lifecycle.rescue_instance, "active", "rescuing", "rescued", power_state.RUNNING),
    (lifecycle.rescue_instance, "stopped", "rescuing", "rescued", power_state.RUNNING),
    (lifecycle.unrescue_instance, "rescued", "unrescuing", "active", power_state.RUNNING),
]


@pytest.mark.parametrize(("step", "before", "task", "after", "power"), SUCCESSES)
def test_each_step_moves_the_instance_to_its_final_state_with_a_success_event(
    db_url: str, step: Step, before: str, task: str, after: str, power: int
) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, before, task)
    assert step(_ctx(db_url, driver), uuid) == lifecycle.DONE
    assert _state(db_url, uuid) == (after, None, power)
    assert driver.get_info(uuid).power_state == power
    event = f"compute_{step.__name__}"
    assert _events(db_url, uuid) == [(event, "Success")]
    assert _fault(db_url, uuid) is None


@pytest.mark.parametrize(("step", "before", "task", "after", "power"), SUCCESSES)
def test_a_redelivered_step_finds_the_state_moved_and_does_nothing(
    db_url: str, step: Step, before: str, task: str, after: str, power: int
) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, before, task)
    step(_ctx(db_url, driver), uuid)
    assert step(_ctx(db_url, driver), uuid) == lifecycle.SKIPPED
    assert _state(db_url, uuid) == (after, None, power)
    assert len(_events(db_url, uuid)) == 1


def test_a_step_for_another_host_is_skipped(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "powering-off")
    assert lifecycle.stop_instance(_ctx(db_url, driver, "host2"), uuid) == lifecycle.SKIPPED
    assert _state(db_url, uuid) == ("active", "powering-off", power_state.RUNNING)
    assert driver.get_info(uuid).power_state == power_state.RUNNING


def test_suspend_stashes_the_old_vm_state_and_resume_pops_it(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "suspending")
    lifecycle.suspend_instance(_ctx(db_url, driver), uuid)
    assert _sysmeta(db_url, uuid)["old_vm_state"] == "active"
    with session_scope(db_url) as session:
        cas_update(session, uuid, task_state="resuming")
    lifecycle.resume_instance(_ctx(db_url, driver), uuid)
    assert "old_vm_state" not in _sysmeta(db_url, uuid)
    assert _state(db_url, uuid) == ("active", None, power_state.RUNNING)


def test_start_drops_the_shelve_keys_and_keeps_the_lock(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "stopped", "powering-on")
    meta = {"shelved_at": "x", "shelved_image_id": "i", "shelved_host": "h", "locked": True}
    with session_scope(db_url) as session:
        get_instance(session, uuid).system_metadata = meta
    lifecycle.start_instance(_ctx(db_url, driver), uuid)
    assert _sysmeta(db_url, uuid) == {"locked": True}


def test_rescue_resets_launched_at(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "rescuing")
    with session_scope(db_url) as session:
        before = get_instance(session, uuid).launched_at
    lifecycle.rescue_instance(_ctx(db_url, driver), uuid)
    with session_scope(db_url) as session:
        after = get_instance(session, uuid).launched_at
    assert before is not None and after is not None and after >= before


@pytest.mark.parametrize(
    ("hard", "before", "tasks"),
    [
        (False, "active", ("rebooting", "reboot_pending", "reboot_started")),
        (True, "active", ("rebooting_hard", "reboot_pending_hard", "reboot_started_hard")),
        (True, "stopped", ("rebooting_hard", "reboot_pending_hard", "reboot_started_hard")),
        (True, "paused", ("rebooting_hard", "reboot_pending_hard", "reboot_started_hard")),
        (True, "suspended", ("rebooting_hard", "reboot_pending_hard", "reboot_started_hard")),
    ],
)
def test_reboot_goes_through_pending_and_started_to_active(
    db_url: str, hard: bool, before: str, tasks: tuple[str, str, str]
) -> None:
    seen: list[str | None] = []
    driver = HookedDriver(lambda uuid: None)
    uuid = _server(db_url, driver, before, tasks[0])
    driver.hook = lambda uuid: seen.append(_state(db_url, uuid)[1])
    assert lifecycle.reboot_instance(_ctx(db_url, driver), uuid, hard=hard) == "done"
    assert seen == [tasks[2]]
    assert _state(db_url, uuid) == ("active", None, power_state.RUNNING)
    assert _events(db_url, uuid) == [("compute_reboot_instance", "Success")]
    assert lifecycle.reboot_instance(_ctx(db_url, driver), uuid, hard=hard) == ("skipped")


def test_a_reboot_of_a_rescued_instance_leaves_it_rescued(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "rescued", "rebooting_hard")
    lifecycle.reboot_instance(_ctx(db_url, driver), uuid, hard=True)
    assert _state(db_url, uuid)[:2] == ("rescued", None)


def test_a_soft_reboot_does_not_run_a_hard_reboots_message(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "rebooting_hard")
    assert lifecycle.reboot_instance(_ctx(db_url, driver), uuid) == "skipped"
    assert _state(db_url, uuid)[1] == "rebooting_hard"


FAILURES = [
    # step, failing driver call, error, vm before, task, vm after (Nova, §2.3)
    (lifecycle.stop_instance, "power_off", None, "active", "powering-off", "active"),
    (lifecycle.start_instance, "power_on", None, "stopped", "powering-on", "stopped"),
    (lifecycle.pause_instance, "pause", None, "active", "pausing", "active"),
    (lifecycle.suspend_instance, "suspend", None, "active", "suspending", "error"),
    (lifecycle.suspend_instance, "suspend", NotImplementedError, "active", "suspending", "active"),
    (lifecycle.resume_instance, "resume", None, "suspended", "resuming", "error"),
    (
        lifecycle.resume_instance,
        "resume",
        NotImplementedError,
        "suspended",
        "resuming",
        "suspended",
    ),
    (lifecycle.rescue_instance, "rescue", None, "active", "rescuing", "error"),
    (lifecycle.unrescue_instance, "unrescue", None, "rescued", "unrescuing", "error"),
    (
        lifecycle.unrescue_instance,
        "unrescue",
        NotImplementedError,
        "rescued",
        "unrescuing",
        "active",
    ),
]


@pytest.mark.parametrize(("step", "call", "error", "before", "task", "after"), FAILURES)
def test_a_driver_failure_ends_as_nova_ends_it_with_a_fault_and_an_error_event(
    db_url: str,
    step: Step,
    call: str,
    error: type[Exception] | None,
    before: str,
    task: str,
    after: str,
) -> None:
    driver = FailingDriver(call, error=error)
    uuid = _server(db_url, driver, before, task)
    with pytest.raises(Exception) as raised:
        step(_ctx(db_url, driver), uuid)
    vm_state, task_state, _ = _state(db_url, uuid)
    assert (vm_state, task_state) == (after, None)
    fault = _fault(db_url, uuid)
    assert fault is not None and fault[1] == str(raised.value)[:255]
    [(event, result)] = _events(db_url, uuid)
    assert (event, result) == (f"compute_{step.__name__}", "Error")
    with session_scope(db_url) as session:
        action = session.scalars(select(InstanceAction)).one()
        assert action.message == "Error" and action.finish_time is not None
        assert "Traceback" in (action.events[0].traceback or "")


def test_a_failed_rescue_is_instance_not_rescuable(db_url: str) -> None:
    driver = FailingDriver("rescue")
    uuid = _server(db_url, driver, "active", "rescuing")
    with pytest.raises(lifecycle.InstanceNotRescuable, match="Driver Error: Hypervisor error"):
        lifecycle.rescue_instance(_ctx(db_url, driver), uuid)
    assert _fault(db_url, uuid) == (
        400,
        f"Instance {uuid} cannot be rescued: Driver Error: "
        f"Hypervisor error: simulated rescue failure of {uuid}",
    )


def test_rescue_boots_the_instances_own_image_and_unrescue_restores_the_guest(
    db_url: str,
) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "rescuing")
    with session_scope(db_url) as session:
        image_ref = get_instance(session, uuid).image_ref
    lifecycle.rescue_instance(_ctx(db_url, driver), uuid)
    assert driver.is_rescued(uuid)
    rescue_image = driver._guests[uuid].rescue_image
    assert rescue_image is not None and rescue_image.id == image_ref
    with session_scope(db_url) as session:
        cas_update(session, uuid, task_state="unrescuing")
    lifecycle.unrescue_instance(_ctx(db_url, driver), uuid)
    assert not driver.is_rescued(uuid)
    assert _state(db_url, uuid) == ("active", None, power_state.RUNNING)


def test_a_failed_reboot_of_a_running_guest_keeps_the_instance_with_a_fault(
    db_url: str,
) -> None:
    driver = FailingDriver("reboot")
    uuid = _server(db_url, driver, "active", "rebooting")
    assert lifecycle.reboot_instance(_ctx(db_url, driver), uuid) == "done"
    assert _state(db_url, uuid) == ("active", None, power_state.RUNNING)
    assert _fault(db_url, uuid) is not None
    # As Nova: the error was handled, so the event reads Success.
    assert _events(db_url, uuid) == [("compute_reboot_instance", "Success")]


def test_a_failed_reboot_of_a_guest_that_is_not_running_errors_the_instance(
    db_url: str,
) -> None:
    driver = FailingDriver("reboot")
    uuid = _server(db_url, driver, "stopped", "rebooting_hard")
    with pytest.raises(HypervisorError):
        lifecycle.reboot_instance(_ctx(db_url, driver), uuid, hard=True)
    assert _state(db_url, uuid)[:2] == ("error", None)
    assert _events(db_url, uuid) == [("compute_reboot_instance", "Error")]


def test_a_delete_arriving_mid_step_supersedes_it(db_url: str) -> None:
    def delete_requested(uuid: str) -> None:
        with session_scope(db_url) as session:
            cas_update(session, uuid, task_state="deleting")

    driver = HookedDriver(delete_requested)
    uuid = _server(db_url, driver, "active", "powering-off")
    assert lifecycle.stop_instance(_ctx(db_url, driver), uuid) == "superseded"
    assert _state(db_url, uuid)[:2] == ("active", "deleting")
    assert _events(db_url, uuid) == [("compute_stop_instance", "Error")]


def test_stop_accepts_a_cleared_task_state_once_the_guest_is_off(db_url: str) -> None:
    def cleared(uuid: str) -> None:
        with session_scope(db_url) as session:
            cas_update(session, uuid, task_state=None)

    driver = HookedDriver(cleared)
    uuid = _server(db_url, driver, "active", "powering-off")
    assert lifecycle.stop_instance(_ctx(db_url, driver), uuid) == "done"
    assert _state(db_url, uuid) == ("stopped", None, power_state.SHUTDOWN)


def test_abort_undoes_a_step_that_never_ran_once(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver, "active", "powering-off")
    error = HypervisorError(reason="delivered too often")
    assert steps.abort(sessions_for(db_url), lifecycle.STOP, uuid, REQUEST, "host1", error)
    assert not steps.abort(sessions_for(db_url), lifecycle.STOP, uuid, REQUEST, "host1", error)
    assert _state(db_url, uuid)[:2] == ("active", None)
    assert _fault(db_url, uuid) == (500, "Hypervisor error: delivered too often")
    assert _events(db_url, uuid) == [("compute_stop_instance", "Error")]
