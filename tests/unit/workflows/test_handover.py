"""What a step that replaces itself leaves as its operation's record (tasks/base.py): the
replacement with task ids of its own, linked to the step, its error callback on its first
step so the reaper can undo a replacement the broker lost."""

from __future__ import annotations

from compute import in_flight
from tasks.base import handover_message, steps_of
from workflows.moves import move_chain

IDS = ("mig-1", "u-1", "req-1")


def test_a_replacement_chain_s_record_names_its_errback_on_its_first_step() -> None:
    chain = move_chain(*IDS, "host1", "host2", [])
    for task in steps_of(chain):
        task.options.setdefault("task_id", f"id-{task.task}")
    chain.freeze("scheduler-step")
    message = handover_message(chain, "root-1", "scheduler-step")
    first = in_flight.first_task(message["signature"])
    assert first["task"] == "compute.prep_resize"
    assert [e["task"] for e in first["options"]["link_error"]] == ["scheduler.on_move_error"]
    assert in_flight.task_id_of(message) == "id-compute.prep_resize"
    assert in_flight.instances_of(message) == ["u-1"]
    assert (message["root_id"], message["parent_id"]) == ("root-1", "scheduler-step")
    # Each step keeps its own id: none inherits the scheduler step's.
    ids = [t.id for t in steps_of(chain)]
    assert ids == [f"id-compute.{n}" for n in ("prep_resize", "resize_instance", "finish_resize")]
