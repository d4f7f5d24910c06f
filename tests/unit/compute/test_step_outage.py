"""A database outage in the middle of a host step (``compute.steps.run_step`` inside a
worker's outage budget, ``models.outage``): the step waits it out phase by phase and
ends as it would have without it: one guest, ACTIVE, no fault. Past the budget, the step
fails with its own failure handling once the database answers.

The database is real SQLite; its outage is scheduled by the test in the step's
``Sessions`` factory (``ScheduledOutage``): a transaction refused before it starts, cut
before its commit (rolled back), or committed with its answer lost, exactly where the
test wants it. (Real outages, through a TCP proxy in front of PostgreSQL, are in
``tests/integration/test_database_outage.py``.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from compute import lifecycle, shelve
from compute.build import build_and_run_instance
from compute.claims import ResourceRequest, consumer_allocations
from compute.instance_actions import latest_fault
from compute.instance_state import get_instance
from compute.steps import DONE, StepContext, run_step
from models import InstanceAction, outage, utcnow
from models.db import session_scope
from novaq.exceptions import DatabaseUnavailable
from tests.db_outage import ScheduledOutage
from tests.factories import claim, host_resources, make_compute_node, make_instance, node_row
from virt import power_state
from virt.driver import GuestInfo, GuestSpec
from virt.fake import FakeDriver

REQUEST = "req-outage"
QUICK = outage.Patience(tolerance_s=0.4, first_wait_s=0.01, max_wait_s=0.05)


class OutageAfterSpawn(FakeDriver):
    """A hypervisor that spawns, then the database goes as the test planned: the next
    transaction after the spawn is the step's finish."""

    def __init__(self, db: ScheduledOutage, plan: list[str], down_s: float = 0.0) -> None:
        super().__init__(host_resources("host1"))
        self.db, self.after_spawn, self.down_s = db, plan, down_s

    def spawn(self, spec: GuestSpec) -> GuestInfo:
        info = super().spawn(spec)
        self.db.plan.extend(self.after_spawn)
        if self.down_s:
            self.db.down_until = time.monotonic() + self.down_s
        return info


@pytest.fixture
def budget() -> Iterator[None]:
    with outage.tolerating(QUICK):
        yield


def _placed(db_url: str) -> tuple[str, int]:
    node_id = make_compute_node(db_url, "host1")
    uuid = make_instance(db_url, host="host1", node="host1", request_id=REQUEST)
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid, node_id


def _build(db: ScheduledOutage, driver: FakeDriver, uuid: str) -> Any:
    return build_and_run_instance(StepContext(db, driver, "host1", REQUEST), uuid)


def _record(db_url: str, uuid: str) -> tuple[tuple[str, str | None], list[Any], str | None]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        action = session.scalars(
            select(InstanceAction).where(InstanceAction.instance_uuid == uuid)
        ).one()
        fault = latest_fault(session, uuid)
        events = [(e.event, e.result) for e in action.events]
        return (instance.vm_state, instance.task_state), events, fault and fault.message


BUILD_OK = [("compute__do_build_and_run_instance", "Success")]


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(["down"], id="refused at the finish"),
        pytest.param(["cut"], id="cut before the finish commits"),
        pytest.param(["lost"], id="the finish commits, its answer is lost"),
        pytest.param(["cut", "down", "lost"], id="all three in a row"),
    ],
)
def test_an_outage_at_the_finish_of_a_build_ends_active_with_one_guest(
    db_url: str, budget: None, plan: list[str]
) -> None:
    uuid, _ = _placed(db_url)
    db = ScheduledOutage(db_url)
    driver = OutageAfterSpawn(db, plan)
    assert _build(db, driver, uuid).outcome == "active"
    assert db.failed == len(plan) and db.plan == []
    assert driver.spawn_count == 1 and driver.destroy_count == 0
    assert driver.get_info(uuid).power_state == power_state.RUNNING
    assert _record(db_url, uuid) == (("active", None), BUILD_OK, None)


@pytest.mark.parametrize("mode", ["down", "cut"])
def test_an_outage_at_the_begin_of_a_build_is_waited_out(
    db_url: str, budget: None, mode: str
) -> None:
    uuid, _ = _placed(db_url)
    db = ScheduledOutage(db_url)
    db.plan = [mode]
    driver = FakeDriver(host_resources("host1"))
    assert _build(db, driver, uuid).outcome == "active"
    assert driver.spawn_count == 1
    assert _record(db_url, uuid) == (("active", None), BUILD_OK, None)


def test_a_database_down_when_the_act_of_a_build_starts_is_waited_out(
    db_url: str, budget: None
) -> None:
    """The build reads the guest's spec in its begin's transaction (``Step.prepare``), so
    its act needs no database: refused twice after the begin, it is the finish that
    waits for the database."""
    uuid, _ = _placed(db_url)
    db = ScheduledOutage(db_url)
    db.plan = ["", "down", "down"]  # the begin passes, then the next transaction is refused twice
    driver = FakeDriver(host_resources("host1"))
    assert _build(db, driver, uuid).outcome == "active"
    assert db.failed == 2 and driver.spawn_count == 1
    assert _record(db_url, uuid) == (("active", None), BUILD_OK, None)


def _shelved_offloaded(db_url: str) -> tuple[str, int]:
    """A shelved-offloaded server claimed on host1 for its unshelve."""
    node_id = make_compute_node(db_url, "host1")
    uuid = make_instance(
        db_url,
        host="host1",
        node="host1",
        vm_state="shelved_offloaded",
        task_state="unshelving",
        request_id=REQUEST,
    )
    claim(db_url, node_id, uuid, ResourceRequest(1, 512, 1))
    return uuid, node_id


def test_a_transaction_cut_inside_the_act_fails_the_step_as_its_act_would(
    db_url: str, budget: None
) -> None:
    """An act is not made again (it may have moved the task_state, or the guest, already):
    a transaction cut inside it (the unshelve's read of its guest) is the act's failure,
    undone as the step undoes one (the unshelve's: back to SHELVED_OFFLOADED with the
    fault, nothing spawned, claim gone). (The build reads its guest in its begin: a cut
    there is waited out, above.)"""
    uuid, node_id = _shelved_offloaded(db_url)
    db = ScheduledOutage(db_url)
    db.plan = ["", "cut"]
    driver = FakeDriver(host_resources("host1"))
    with pytest.raises(DatabaseUnavailable):
        shelve.unshelve_instance(StepContext(db, driver, "host1", REQUEST), uuid)
    assert driver.spawn_count == 0
    state, events, fault = _record(db_url, uuid)
    assert state == ("shelved_offloaded", None)
    assert events == [("compute_unshelve_instance", "Error")]
    assert fault is not None and fault.startswith("database is unavailable")
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid, node_id) == {}


def test_past_the_budget_a_build_is_undone_once_the_database_answers(
    db_url: str, budget: None
) -> None:
    """The database stays away longer than the budget after the spawn: the finish gives
    up, and the build's own undo (guest destroyed, claim released, ERROR with the fault)
    runs on a budget of its own as soon as the database is back."""
    uuid, node_id = _placed(db_url)
    db = ScheduledOutage(db_url)
    driver = OutageAfterSpawn(db, [], down_s=QUICK.tolerance_s + 0.2)
    with pytest.raises(DatabaseUnavailable):
        _build(db, driver, uuid)
    assert driver.spawn_count == 1 and driver.destroy_count == 1
    state, events, fault = _record(db_url, uuid)
    assert state == ("error", None)
    assert events == [("compute__do_build_and_run_instance", "Error")]
    assert fault is not None and fault.startswith("database is unavailable")
    with session_scope(db_url) as session:
        assert consumer_allocations(session, uuid, node_id) == {}
    # the outage is not counted against the host (BuildFailureWeigher, auto-disable)
    assert (node_row(db_url, node_id).stats or {}).get("failed_builds", 0) == 0


def test_an_outage_at_the_finish_of_a_stop_ends_shutoff(db_url: str, budget: None) -> None:
    uuid = make_instance(
        db_url,
        host="host1",
        node="host1",
        vm_state="active",
        task_state="powering-off",
        power_state=power_state.RUNNING,
        launched_at=utcnow(),
        request_id=REQUEST,
    )
    db = ScheduledOutage(db_url)

    class OutageAfterPowerOff(FakeDriver):
        def power_off(self, uuid: str, timeout_s: float = 0) -> None:
            super().power_off(uuid, timeout_s)
            db.plan.extend(["cut", "lost"])

    driver = OutageAfterPowerOff(host_resources("host1"))
    driver.spawn(GuestSpec(uuid=uuid, name="instance-00000001", vcpus=1, memory_mb=512, root_gb=1))
    outcome = run_step(StepContext(db, driver, "host1", REQUEST), lifecycle.STOP, uuid)
    assert outcome == DONE and db.failed == 2
    assert _record(db_url, uuid) == (
        ("stopped", None),
        [("compute_stop_instance", "Success")],
        None,
    )
