"""The canvas builders name tasks by string: every name they use is a task the worker
registers (a typo would otherwise only show when a worker rejects the message), and the
public API loads without importing ``tasks/``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery.canvas import Signature, _chain

from scheduler.request_spec import RequestSpec, Selection
from tasks import app
from workflows import build, delete, lifecycle, moves, shelve

ROOT = Path(__file__).resolve().parents[3]


def _signatures(signature: Signature) -> Iterator[Signature]:
    steps = signature.tasks if isinstance(signature, _chain) else [signature]
    for step in steps:
        yield step
        for errback in step.options.get("link_error") or []:
            yield Signature(errback)
    for errback in signature.options.get("link_error") or []:
        yield Signature(errback)


def _every_workflow() -> Iterator[Signature]:
    flavor = {"vcpus": 1, "memory_mb": 1, "root_gb": 1, "ephemeral_gb": 0, "swap": 0}
    spec = RequestSpec(instance_uuid="u", flavor=flavor, image="i")
    yield build.build_workflow("r", [spec])
    yield build.build_step("r", Selection("h", "n", 1, (), "u"), 3)
    yield delete.delete_workflow("u", "r", "h")
    for action in delete.SOFT_DELETE_TASKS:
        yield delete.soft_delete_step(action, "u", "r", "h")
    for action in lifecycle.TASKS:
        yield lifecycle.lifecycle_step(action, "u", "r", "h")
    for action in shelve.SHELVE_TASKS:
        yield shelve.shelve_step(action, "u", "r", "h")
    yield shelve.unshelve_workflow("u", "r")
    yield shelve.unshelve_step("u", "r", "h")
    yield moves.select_workflow("m", "u", "r")
    yield moves.move_chain("m", "u", "r", "a", "b", [])
    yield moves.confirm_workflow("m", "u", "r", "a")
    yield moves.revert_workflow("m", "u", "r", "a", "b")


def test_every_task_a_workflow_names_is_registered() -> None:
    app.loader.import_default_modules()  # what a worker loads (celeryconfig's include)
    named = {s.task for w in _every_workflow() for s in _signatures(w)}
    assert named and named <= set(app.tasks), sorted(named - set(app.tasks))
    assert "scheduler.on_move_error" in named  # errbacks are walked too


@pytest.mark.parametrize(
    "name",
    ["compute.get_diagnostics", "compute.get_console_output", "compute.hypervisor_view"],
)
def test_the_queries_the_api_sends_are_registered(name: str) -> None:
    app.loader.import_default_modules()
    assert name in app.tasks


def test_the_public_api_and_the_builders_never_import_tasks() -> None:
    code = (
        "import sys\n"
        "import workflows.api, workflows.build, workflows.delete, workflows.lifecycle\n"
        "import workflows.moves, workflows.shelve, workflows.periodic, workflows.dispatch\n"
        "print(sorted(m for m in sys.modules if m == 'tasks' or m.startswith('tasks.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
