"""The timeline's assembly and rendering, from rows built in memory: operations in the
order they started, each fault and heal under the operation running at its time, steps
with no action of their own grouped by request, a redelivery rendered with its workers;
and the reprs that make every step findable by its instance in Flower."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rich.console import Console

from models import InstanceAction, InstanceActionEvent, InstanceFault, ResourceHeal, StepRecord
from models.states import PowerState, TaskState, VmState
from novaq.cli.timeline import render_tree
from workflows.api.timeline import Rows, assemble
from workflows.canvas import flower_reprs, step

T0 = dt.datetime(2026, 11, 24, 6, 0, 0)
SERVER = {
    "uuid": "u-1",
    "name": "vm",
    "vm_state": "active",
    "task_state": None,
    "power_state": "RUNNING",
    "host": "host2",
    "deleted": False,
}


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def _action(request_id: str, action: str, start: float, end: float | None) -> InstanceAction:
    row = InstanceAction(
        instance_uuid="u-1",
        action=action,
        request_id=request_id,
        start_time=_at(start),
        finish_time=None if end is None else _at(end),
    )
    row.events = [
        InstanceActionEvent(
            id=1,
            event=f"compute_{action}",
            host="host1",
            start_time=_at(start + 1),
            finish_time=None if end is None else _at(end),
            result=None if end is None else "Success",
        )
    ]
    return row


def _step(request_id: str, task: str, start: float, **values: Any) -> StepRecord:
    row = StepRecord(
        instance_uuid="u-1",
        request_id=request_id,
        task_id=f"id-{task}",
        task_name=task,
        queue=values.pop("queue", "compute.host1"),
        worker=values.pop("worker", "compute@host1"),
        host="host1",
        deliveries=values.pop("deliveries", 1),
        delivery_log=values.pop("delivery_log", "compute@host1 t\n"),
        started_at=_at(start),
        ended_at=_at(start + 0.5),
        outcome=values.pop("outcome", "success"),
        vm_state_before=VmState.ACTIVE,
        task_state_before=TaskState.RESIZE_PREP,
        power_state_before=PowerState.RUNNING,
        vm_state_after=VmState.ACTIVE,
        task_state_after=TaskState.RESIZE_MIGRATING,
        power_state_after=PowerState.RUNNING,
    )
    for key, value in values.items():
        setattr(row, key, value)
    return row


def _rows() -> Rows:
    return Rows(
        actions=[_action("req-b", "resize", 10, None), _action("req-a", "create", 0, 5)],
        steps=[
            _step("req-a", "scheduler.select_destinations", 0.1, queue="scheduler"),
            _step("req-b", "compute.prep_resize", 10.2),
            _step(
                "req-b",
                "compute.resize_instance",
                11,
                deliveries=2,
                delivery_log="compute@host1 a\ncompute@host1 b\n",
                outcome=None,
                ended_at=None,
            ),
            _step("req-x", "compute.stop_instance", 30),
        ],
        faults=[
            InstanceFault(
                instance_uuid="u-1", code=500, message="boom", host="host1", created_at=_at(12)
            )
        ],
        heals=[
            ResourceHeal(
                created_at=_at(3),
                host="host1",
                node="host1",
                consumer_uuid="u-1",
                action="removed",
                resources="VCPU=1",
                reason="leaked",
            )
        ],
    )


def test_operations_are_in_start_order_with_faults_and_heals_under_theirs() -> None:
    data = assemble(SERVER, _rows())
    ops = data["operations"]
    assert [(o["action"], o["request_id"]) for o in ops] == [
        ("create", "req-a"),
        ("resize", "req-b"),
        ("-", "req-x"),
    ]
    create, resize, unknown = ops
    assert [h["action"] for h in create["heals"]] == ["removed"]
    assert [f["message"] for f in resize["faults"]] == ["boom"] and not create["faults"]
    assert [s["task"] for s in resize["steps"]] == [
        "compute.prep_resize",
        "compute.resize_instance",
    ]
    assert resize["result"] == "running" and create["result"] == "Success"
    assert unknown["steps"][0]["task"] == "compute.stop_instance"
    lost = resize["steps"][1]
    assert lost["outcome"] == "unfinished" and lost["deliveries"] == 2
    assert lost["transitions"]["task_state"] == ["resize_prep", "resize_migrating"]
    assert create["steps"][0]["duration_s"] == 0.5


def _text(data: dict[str, Any]) -> str:
    console = Console(width=300, record=True, color_system=None)
    console.print(render_tree(data))
    return console.export_text()


def test_the_tree_shows_a_redelivery_with_each_worker_and_the_state_changes() -> None:
    text = _text(assemble(SERVER, _rows()))
    assert "delivered 2 times" in text
    assert "compute@host1 a" in text and "compute@host1 b" in text
    assert "task_state resize_prep -> resize_migrating" in text
    assert "[unfinished] compute.resize_instance" in text
    assert "fault 500 boom" in text and "heal removed VCPU=1" in text


def test_names_that_look_like_markup_are_printed_as_they_are() -> None:
    text = _text(assemble({**SERVER, "name": "[bold]x[/bold]"}, Rows()))
    assert "[bold]x[/bold]" in text and "no operation recorded" in text


def test_a_step_names_its_instance_and_request_where_flower_shows_and_searches() -> None:
    spec = {"flavor": {"name": "m1", "extra_specs": {"k" * 50: "v" * 500}}}
    signature = step(
        "scheduler.select_destinations",
        request_id="req-1",
        instance_uuids=["u-1", "u-2"],
        request_spec=spec,
    )
    options = signature.options
    assert options["argsrepr"] == "instance=u-1 instance=u-2 request=req-1"
    kwargsrepr = options["kwargsrepr"]
    assert kwargsrepr.startswith("{'instance_uuids': ['u-1', 'u-2'], 'request_id': 'req-1'")
    assert len(kwargsrepr) < 200 and "'request_spec': {" in kwargsrepr
    assert flower_reprs({"host": "host1"}) == {}
