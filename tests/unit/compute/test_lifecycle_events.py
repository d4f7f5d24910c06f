"""Power state from hypervisor lifecycle events (Nova's ``handle_lifecycle_event``): the
events of a fresh libvirt ``test:///`` node (it emits them for start, destroy, suspend and
resume), translated and dispatched by the driver, handled on SQLite rows. The stops the
sync asks of the API are recorded, as in the power-sync tests."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from compute import busy_guests, lifecycle
from compute.instance_state import get_instance
from compute.lifecycle_events import IGNORED, STALE, handle_lifecycle_event
from compute.periodic import PeriodicContext
from compute.periodic.power_sync import IN_SYNC, PENDING_TASK
from compute.sessions import sessions_for
from compute.steps import DONE, StepContext, StepRun, run_step
from models.db import session_scope
from tasks.periodic import send_requests
from tests.unit.compute.periodic.servers import host1_server, periodic_ctx, spawn_guest
from tests.unit.compute.periodic.test_power_sync import StopRecorder
from virt import event as virtevent
from virt import power_state
from virt.event import LifecycleEvent
from virt.host_profile import HostProfile
from virt.libvirt.driver import LibvirtDriver
from virt.libvirt.events import EventDispatcher, transition_of
from virt.node_xml import test_uri, write_node_xml

DELAY_S = 0.5


class Recorder:
    """A listener that keeps every event, and lets a test wait for one."""

    def __init__(self) -> None:
        self.events: list[LifecycleEvent] = []
        self._changed = threading.Condition()

    def __call__(self, event: LifecycleEvent) -> None:
        with self._changed:
            self.events.append(event)
            self._changed.notify_all()

    def transitions(self, uuid: str) -> list[int]:
        return [e.transition for e in self.events if e.uuid == uuid]

    def wait_for(self, check: Callable[[], bool], timeout_s: float = 5.0) -> None:
        with self._changed:
            assert self._changed.wait_for(check, timeout_s), self.events


@pytest.fixture
def hypervisor(tmp_path: Path) -> Iterator[LibvirtDriver]:
    node = write_node_xml(HostProfile("host1", vcpus=16, memory_mb=65536), tmp_path / "node")
    driver = LibvirtDriver(test_uri(node), instances_path=tmp_path / "instances")
    driver.init_host("host1")
    yield driver
    driver.close()


@pytest.fixture
def recorder(hypervisor: LibvirtDriver) -> Recorder:
    recorder = Recorder()
    hypervisor.register_event_listener(recorder, delay_s=DELAY_S)
    return recorder


UUID = "3f1c2b4a-5d6e-4f70-8a9b-0c1d2e3f4a5b"


def test_libvirt_events_arrive_as_novas_transitions(
    hypervisor: LibvirtDriver, recorder: Recorder
) -> None:
    spawn_guest(hypervisor, UUID)
    recorder.wait_for(lambda: recorder.transitions(UUID) == [virtevent.STARTED])
    hypervisor.pause(UUID)
    hypervisor.unpause(UUID)

    recorder.wait_for(lambda: len(recorder.transitions(UUID)) == 3)
    assert recorder.transitions(UUID) == [virtevent.STARTED, virtevent.PAUSED, virtevent.RESUMED]


def test_a_stopped_event_is_held_back(hypervisor: LibvirtDriver, recorder: Recorder) -> None:
    spawn_guest(hypervisor, UUID)
    recorder.wait_for(lambda: recorder.transitions(UUID) == [virtevent.STARTED])

    stopped_at = time.monotonic()
    hypervisor.power_off(UUID)
    recorder.wait_for(lambda: virtevent.STOPPED in recorder.transitions(UUID))

    assert time.monotonic() - stopped_at >= DELAY_S * 0.9


def test_a_reboots_start_cancels_its_stopped_event(
    hypervisor: LibvirtDriver, recorder: Recorder
) -> None:
    spawn_guest(hypervisor, UUID)
    hypervisor.power_off(UUID)
    hypervisor.power_on(UUID)  # the stop and start of a reboot

    time.sleep(DELAY_S * 2)
    assert recorder.transitions(UUID) == [virtevent.STARTED, virtevent.STARTED]


def test_no_listener_no_events(hypervisor: LibvirtDriver, recorder: Recorder) -> None:
    hypervisor.register_event_listener(None)
    spawn_guest(hypervisor, UUID)

    time.sleep(DELAY_S)
    assert recorder.events == []


@pytest.mark.parametrize(
    ("libvirt_event", "transition"),
    [(2, virtevent.STARTED), (5, virtevent.STOPPED), (8, virtevent.STOPPED)]
    + [(3, virtevent.PAUSED), (4, virtevent.RESUMED), (7, virtevent.SUSPENDED)]
    + [(0, None), (1, None), (6, None)],
)
def test_translation(libvirt_event: int, transition: int | None) -> None:
    assert transition_of(libvirt_event) == transition


def test_a_failing_listener_does_not_stop_the_dispatcher() -> None:
    seen: list[str] = []

    def listener(event: LifecycleEvent) -> None:
        seen.append(event.uuid)
        raise RuntimeError("boom")

    dispatcher = EventDispatcher(listener, delay_s=0)
    dispatcher.put(LifecycleEvent("a", virtevent.STARTED))
    dispatcher.put(LifecycleEvent("b", virtevent.STOPPED))
    dispatcher.stop()
    assert seen == ["a", "b"]


# -- handle_lifecycle_event ------------------------------------------------------------------


def _row(db_url: str, uuid: str) -> tuple[str, str | None, int]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        return instance.vm_state, instance.task_state, instance.power_state


def _ctx(db_url: str, driver: Any, handle: bool = True) -> PeriodicContext:
    """The unit tier turns the workaround off by default (tests/unit/conftest.py)."""
    workarounds = {"handle_virt_lifecycle_events": handle}
    return periodic_ctx(db_url, driver, workarounds=workarounds)


def _handled(ctx: PeriodicContext, driver: LibvirtDriver, api: StopRecorder) -> Recorder:
    """Every event handled by ``handle_lifecycle_event``, its outcome recorded and the stop
    it asks for sent to ``api``, as the compute worker's listener does."""
    outcomes = Recorder()

    def handle(event: LifecycleEvent) -> None:
        outcome = handle_lifecycle_event(ctx, event)
        send_requests(ctx, {outcome: [event.uuid]}, api)
        outcomes(LifecycleEvent(f"{event.uuid}:{outcome}", event.transition))

    driver.register_event_listener(handle, delay_s=DELAY_S)
    return outcomes


def test_a_guest_that_stops_by_itself_is_synced_and_its_server_stopped(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = host1_server(db_url, "active")
    spawn_guest(hypervisor, uuid)
    api = StopRecorder()
    outcomes = _handled(_ctx(db_url, hypervisor), hypervisor, api)

    hypervisor.power_off(uuid)  # the guest OS powered itself off
    outcomes.wait_for(lambda: f"{uuid}:stop" in [e.uuid for e in outcomes.events])

    assert _row(db_url, uuid) == ("active", None, power_state.SHUTDOWN)
    assert api.calls == [("stop", uuid)]


def test_a_paused_guest_power_state_is_synced_at_once(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = host1_server(db_url, "active")
    spawn_guest(hypervisor, uuid)
    api = StopRecorder()
    outcomes = _handled(_ctx(db_url, hypervisor), hypervisor, api)

    hypervisor.pause(uuid)
    outcomes.wait_for(lambda: f"{uuid}:warn_paused" in [e.uuid for e in outcomes.events])

    assert _row(db_url, uuid) == ("active", None, power_state.PAUSED)
    assert api.calls == []


def test_a_server_with_a_task_in_flight_is_left_alone(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    uuid = host1_server(db_url, "active", task_state="powering-off")
    spawn_guest(hypervisor, uuid)
    ctx = _ctx(db_url, hypervisor)
    hypervisor.power_off(uuid)

    outcome = handle_lifecycle_event(ctx, LifecycleEvent(uuid, virtevent.STOPPED))

    assert outcome == "pending_task"
    assert _row(db_url, uuid) == ("active", "powering-off", power_state.RUNNING)


def test_an_event_during_this_workers_own_step_reads_no_row(
    db_url: str, hypervisor: LibvirtDriver
) -> None:
    """The guest's event of a step this worker is running (a boot's Started) is skipped as
    a pending task from ``compute.busy_guests``, without a transaction; once the step
    is done the same event is synced from the row again."""
    uuid = host1_server(db_url, "active", task_state="pausing", request_id="req-busy")
    spawn_guest(hypervisor, uuid)
    ctx = _ctx(db_url, hypervisor)
    seen: dict[str, Any] = {}

    def count(*_: Any) -> None:
        seen["statements"] += 1

    def pause(step_ctx: StepContext, run: StepRun) -> None:
        step_ctx.driver.pause(run.instance_uuid)
        seen["statements"] = 0
        event.listen(Engine, "before_cursor_execute", count)
        try:
            seen["outcome"] = handle_lifecycle_event(ctx, LifecycleEvent(uuid, virtevent.PAUSED))
        finally:
            event.remove(Engine, "before_cursor_execute", count)

    step_ctx = StepContext(sessions_for(db_url), hypervisor, "host1", "req-busy")
    assert run_step(step_ctx, dataclasses.replace(lifecycle.PAUSE, act=pause), uuid) == DONE

    assert seen == {"outcome": PENDING_TASK, "statements": 0}
    assert busy_guests.task_of(uuid) is None
    assert handle_lifecycle_event(ctx, LifecycleEvent(uuid, virtevent.PAUSED)) == IN_SYNC
    assert _row(db_url, uuid) == ("paused", None, power_state.PAUSED)


def test_an_event_of_a_busy_guest_asks_the_hypervisor_nothing(
    db_url: str, hypervisor: LibvirtDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Skipped as a pending task before the guest's power state is read (a libvirt call,
    the handler's whole cost), even when the event is stale: nothing is done either way."""
    uuid = host1_server(db_url, "active", task_state="spawning")
    spawn_guest(hypervisor, uuid)
    ctx = _ctx(db_url, hypervisor)
    asked: list[str] = []
    monkeypatch.setattr(hypervisor, "get_info", lambda u: asked.append(u))

    with busy_guests.acting(uuid, "spawning"):
        outcome = handle_lifecycle_event(ctx, LifecycleEvent(uuid, virtevent.STOPPED))

    assert (outcome, asked) == (PENDING_TASK, [])
    assert _row(db_url, uuid) == ("active", "spawning", power_state.RUNNING)


def test_a_stale_event_is_ignored(db_url: str, hypervisor: LibvirtDriver) -> None:
    uuid = host1_server(db_url, "active")
    spawn_guest(hypervisor, uuid)  # running again by the time the STOPPED is handled
    ctx = _ctx(db_url, hypervisor)

    assert handle_lifecycle_event(ctx, LifecycleEvent(uuid, virtevent.STOPPED)) == STALE
    assert _row(db_url, uuid) == ("active", None, power_state.RUNNING)


def test_the_workaround_turned_off_ignores_events(db_url: str, hypervisor: LibvirtDriver) -> None:
    uuid = host1_server(db_url, "active")
    spawn_guest(hypervisor, uuid, power_state.SHUTDOWN)
    ctx = _ctx(db_url, hypervisor, handle=False)

    assert handle_lifecycle_event(ctx, LifecycleEvent(uuid, virtevent.STOPPED)) == IGNORED
    assert _row(db_url, uuid) == ("active", None, power_state.RUNNING)
    assert ctx.requests == []  # no stop asked of the API


# -- the compute worker's wiring -------------------------------------------------------------


def test_a_compute_worker_listens_only_with_the_workaround_on(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tasks import bootsteps, context
    from tests.factories import make_settings

    assert bootsteps.listen_to_lifecycle_events("host1") is False  # the unit tier's default
    on = make_settings(workarounds={"handle_virt_lifecycle_events": True})
    monkeypatch.setattr(context, "settings", lambda: on)
    driver = context.driver()
    uuid = host1_server(db_url, "active", power=power_state.NOSTATE)
    try:
        assert bootsteps.listen_to_lifecycle_events("host1") is True
        spawn_guest(driver, uuid)  # STARTED: the row learns its guest runs

        deadline = time.monotonic() + 5
        while _row(db_url, uuid)[2] != power_state.RUNNING and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _row(db_url, uuid) == ("active", None, power_state.RUNNING)
    finally:
        driver.register_event_listener(None)
        driver.destroy(uuid)
