"""The step runner on its own: a step run inside a transaction the test rolls back (the
runner's every transaction a savepoint of it), and the operation table's rows each
reaching a registered task, errback and step."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from compute import lifecycle, operations
from compute.instance_actions import latest_fault
from compute.instance_state import get_instance
from compute.sessions import savepoints
from compute.steps import DONE, StepContext, run_step
from models import InstanceAction, utcnow
from models.db import session_scope
from novaq.exceptions import HypervisorError
from tests.factories import host_resources, make_instance, rolled_back
from virt import power_state
from virt.driver import GuestSpec
from virt.fake import FakeDriver

REQUEST = "req-steps"


class PauseFails(FakeDriver):
    def pause(self, uuid: str) -> None:
        raise HypervisorError(reason="simulated pause failure")


def _server(db_url: str, driver: FakeDriver) -> str:
    uuid = make_instance(
        db_url,
        host="host1",
        node="host1",
        vm_state="active",
        task_state="pausing",
        power_state=power_state.RUNNING,
        launched_at=utcnow(),
        request_id=REQUEST,
    )
    driver.spawn(GuestSpec(uuid=uuid, name="instance-00000001", vcpus=1, memory_mb=512, root_gb=1))
    return uuid


def _events(session: Session, uuid: str) -> list[tuple[str, str | None]]:
    action = session.scalars(
        select(InstanceAction)
        .where(InstanceAction.instance_uuid == uuid)
        .execution_options(populate_existing=True)
    ).one()
    return [(e.event, e.result) for e in action.events]


def _committed(db_url: str, uuid: str) -> tuple[str, str | None]:
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        return instance.vm_state, instance.task_state


def test_a_step_runs_inside_a_transaction_the_test_rolls_back(db_url: str) -> None:
    driver = FakeDriver(host_resources("host1"))
    uuid = _server(db_url, driver)
    with rolled_back(db_url) as session:
        ctx = StepContext(savepoints(session), driver, "host1", REQUEST)
        assert run_step(ctx, lifecycle.PAUSE, uuid) == DONE
        inside = get_instance(session, uuid)
        assert (inside.vm_state, inside.task_state) == ("paused", None)
        assert inside.power_state == power_state.PAUSED
        assert _events(session, uuid) == [("compute_pause_instance", "Success")]
    assert _committed(db_url, uuid) == ("active", "pausing")


def test_a_failed_step_is_undone_inside_the_same_outer_transaction(db_url: str) -> None:
    driver = PauseFails(host_resources("host1"))
    uuid = _server(db_url, driver)
    with rolled_back(db_url) as session:
        ctx = StepContext(savepoints(session), driver, "host1", REQUEST)
        with pytest.raises(HypervisorError):
            run_step(ctx, lifecycle.PAUSE, uuid)
        inside = get_instance(session, uuid)
        assert (inside.vm_state, inside.task_state) == ("active", None)
        fault = latest_fault(session, uuid)
        assert fault is not None and "simulated pause failure" in fault.message
        assert _events(session, uuid) == [("compute_pause_instance", "Error")]
    assert _committed(db_url, uuid) == ("active", "pausing")
    with session_scope(db_url) as session:
        assert latest_fault(session, uuid) is None


@pytest.mark.parametrize(
    "op",
    [op for op in operations.OPERATIONS.values() if op.step is not None],
    ids=lambda op: op.action,
)
def test_each_host_operation_has_its_task_errback_and_notification(
    op: operations.Operation,
) -> None:
    from tasks import app, compute, lifecycle, shelve, soft_delete  # noqa: F401 - registers

    assert op.task in app.tasks
    assert op.errback is None or op.errback in app.tasks
    assert op.entry is None or op.entry in app.tasks
    assert op.notification
    assert op.task_state == op.step.task  # type: ignore[union-attr]
    assert operations.of_task(op.task or "", {"hard": op.action == "reboot_hard"}) is op
