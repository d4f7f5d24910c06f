"""The operation table: every server operation described once, read by the API gate
(``workflows.gate``), the task wrappers (``tasks/``) and the errbacks.

A row says where the API accepts the operation (Nova's ``check_instance_state``
decorators of ``nova/compute/api.py`` as a ``Rule``, NOVA_BEHAVIOUR.md §1.1, §1.7,
§2.2-§2.5), the task_state the API sets, the Celery task the API sends (by name: the
public API never imports ``tasks/``), its versioned notification
(``instance.<notification>.start|end|error``, NOVA_BEHAVIOUR.md §10), the host ``Step``
(``compute.steps``: driver call, final state, undo) and the errback linked to it.

Adding a power operation is one row here, one ``Step`` and one driver method.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compute import delete, lifecycle, shelve, soft_delete
from compute.states import TaskState as T
from compute.states import VmState as V
from compute.steps import Step


@dataclass(frozen=True, slots=True)
class Rule:
    """Where an action is allowed. None for ``vm_states``/``task_states`` means any; the
    default task_state is None (no other operation in flight). ``must_have_launched``
    refuses an instance that never ran; ``check_lock`` is Nova's ``check_instance_lock``."""

    vm_states: frozenset[str] | None
    task_states: frozenset[str | None] | None = frozenset({None})
    must_have_launched: bool = True
    check_lock: bool = True


def _states(*names: str) -> frozenset[str]:
    return frozenset(str(n) for n in names)


def _tasks(*names: str | None) -> frozenset[str | None]:
    return frozenset(None if n is None else str(n) for n in names)


# vm_states.ALLOW_TRIGGER_CRASH_DUMP (§1.1).
ALLOW_TRIGGER_CRASH_DUMP = _states(V.ACTIVE, V.PAUSED, V.RESCUED, V.RESIZED, V.ERROR)
# vm_states.ALLOW_SOFT_REBOOT / ALLOW_HARD_REBOOT and task_states.ALLOW_REBOOT (§1.1, §1.2).
ALLOW_SOFT_REBOOT = _states(V.ACTIVE)
ALLOW_HARD_REBOOT = _states(V.ACTIVE, V.STOPPED, V.PAUSED, V.SUSPENDED, V.ERROR)
ALLOW_REBOOT = _tasks(
    None,
    T.REBOOTING,
    T.REBOOT_PENDING,
    T.REBOOT_STARTED,
    T.RESUMING,
    T.REBOOTING_HARD,
    T.UNPAUSING,
    T.PAUSING,
    T.SUSPENDING,
)


@dataclass(frozen=True, slots=True)
class Operation:
    #: The API's name of the action (the gate's key).
    action: str
    gate: Rule | None
    #: The task_state the API sets before it sends ``task``.
    task_state: str | None = None
    #: The Celery task of the host step, by name (routed to ``compute.<host>``).
    task: str | None = None
    #: ``instance.<notification>.*`` sent around the host step.
    notification: str | None = None
    step: Step | None = None
    #: The errback linked to the step (and to ``entry``).
    errback: str | None = None
    #: The task the API sends when it is not the host step (unshelve's scheduler step).
    entry: str | None = None


#: The errback of the power and lifecycle rows (``tasks/lifecycle.py``).
LIFECYCLE_ERRBACK = "scheduler.on_lifecycle_error"


def _host(
    action: str,
    gate: Rule | None,
    step: Step,
    notification: str,
    task: str | None = None,
    errback: str = LIFECYCLE_ERRBACK,
    **more: Any,
) -> Operation:
    return Operation(
        action,
        gate,
        step.task,
        task or f"compute.{step.name}_instance",
        notification,
        step,
        errback,
        **more,
    )


_SHELVE = "scheduler.on_shelve_error"
_SOFT_DELETE = "scheduler.on_soft_delete_error"

_ROWS = (
    # §2.3 power and lifecycle
    _host("stop", Rule(_states(V.ACTIVE, V.ERROR)), lifecycle.STOP, "power_off"),
    _host("start", Rule(_states(V.STOPPED)), lifecycle.START, "power_on"),
    _host("reboot", Rule(ALLOW_SOFT_REBOOT), lifecycle.REBOOT, "reboot"),
    _host(
        "reboot_hard",
        Rule(ALLOW_HARD_REBOOT, ALLOW_REBOOT),
        lifecycle.REBOOT_HARD,
        "reboot",
        "compute.reboot_instance",
    ),
    _host("pause", Rule(_states(V.ACTIVE)), lifecycle.PAUSE, "pause"),
    _host("unpause", Rule(_states(V.PAUSED)), lifecycle.UNPAUSE, "unpause"),
    _host("suspend", Rule(_states(V.ACTIVE)), lifecycle.SUSPEND, "suspend"),
    _host("resume", Rule(_states(V.SUSPENDED)), lifecycle.RESUME, "resume"),
    _host("rescue", Rule(_states(V.ACTIVE, V.STOPPED, V.ERROR)), lifecycle.RESCUE, "rescue"),
    _host("unrescue", Rule(_states(V.RESCUED)), lifecycle.UNRESCUE, "unrescue"),
    _host(
        "trigger_crash_dump",
        Rule(ALLOW_TRIGGER_CRASH_DUMP),
        lifecycle.TRIGGER_CRASH_DUMP,
        "trigger_crash_dump",
        "compute.trigger_crash_dump",
    ),
    # §2.5 moves (migrate is Nova's resize without a flavor: the same decorator)
    Operation("resize", Rule(_states(V.ACTIVE, V.STOPPED)), T.RESIZE_PREP),
    Operation("migrate", Rule(_states(V.ACTIVE, V.STOPPED)), T.RESIZE_PREP),
    Operation("confirm_resize", Rule(_states(V.RESIZED))),
    Operation("revert_resize", Rule(_states(V.RESIZED)), T.RESIZE_REVERTING),
    # §2.4 shelve
    _host(
        "shelve",
        Rule(_states(V.ACTIVE, V.STOPPED, V.PAUSED, V.SUSPENDED)),
        shelve.SHELVE,
        "shelve",
        errback=_SHELVE,
    ),
    _host(
        "shelve_offload",
        Rule(_states(V.SHELVED)),
        shelve.SHELVE_OFFLOAD,
        "shelve_offload",
        errback=_SHELVE,
    ),
    _host(
        "unshelve",
        Rule(_states(V.SHELVED, V.SHELVED_OFFLOADED)),
        shelve.UNSHELVE,
        "unshelve",
        errback=_SHELVE,
        entry="scheduler.select_for_unshelve",
    ),
    # §2.2 delete family: delete is allowed in any state, even never launched
    Operation(
        "delete",
        Rule(None, None, must_have_launched=False),
        T.DELETING,
        "compute.terminate_instance",
        "delete",
        delete.TERMINATE,
    ),
    # soft delete is the API's delete when reclaim_instance_interval > 0: its gate row
    _host(
        "soft_delete",
        None,
        soft_delete.SOFT_DELETE,
        "soft_delete",
        errback=_SOFT_DELETE,
    ),
    _host(
        "restore",
        Rule(_states(V.SOFT_DELETED)),
        soft_delete.RESTORE,
        "restore",
        errback=_SOFT_DELETE,
    ),
    # lock/unlock have no state check in Nova, and are the two a lock does not refuse
    Operation("lock", Rule(None, None, must_have_launched=False, check_lock=False)),
    Operation("unlock", Rule(None, None, must_have_launched=False, check_lock=False)),
    # Nova's update/delete_instance_metadata: API-only, refused when locked or busy
    Operation("update_metadata", Rule(_states(V.ACTIVE, V.PAUSED, V.SUSPENDED, V.STOPPED))),
)

OPERATIONS: dict[str, Operation] = {op.action: op for op in _ROWS}


def operation(action: str) -> Operation:
    try:
        return OPERATIONS[action]
    except KeyError:
        raise ValueError(f"no operation {action!r}") from None


def lifecycle_operations() -> list[Operation]:
    """The power and lifecycle rows (those whose errback is ``on_lifecycle_error``): one
    Celery task each, the hard reboot's row sharing the soft one's task."""
    return [op for op in _ROWS if op.errback == LIFECYCLE_ERRBACK]


def of_task(task: str, kwargs: Mapping[str, Any] | None = None) -> Operation | None:
    """The operation a Celery task (with its keyword arguments) runs: what an errback
    undoes. ``compute.reboot_instance`` with ``hard`` is the hard reboot."""
    kwargs = kwargs or {}
    for op in _ROWS:
        if task in (op.task, op.entry) and op.step is not None:
            if op.action == "reboot" and kwargs.get("hard"):
                continue
            return op
    return None
