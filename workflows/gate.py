"""Nova's API entry gate as data: which vm_states and task_states allow each server
action, and the one function that checks an instance against it.

The table is Nova's ``check_instance_state`` decorators of ``nova/compute/api.py`` read as
rows (NOVA_BEHAVIOUR.md §1.1, §1.7, §2.2-§2.5): ``vm_states`` None means any vm_state,
``task_states`` None means any task_state, and the default task_state is None (no other
operation in flight). ``must_have_launched`` refuses an instance that never ran (e.g. a
build that failed into ERROR). ``check_lock`` is Nova's ``check_instance_lock``: a locked
instance refuses every action but lock and unlock.

It refuses to know about hosts or the database: ``check_instance_host`` needs the
services table and lives with the API calls.

::

    InstanceInvalidState (novaq.exceptions)
    ├── InstanceIsLocked      the instance is locked (system_metadata ``locked``)
    └── InstanceNotReady      the instance has no host yet
    ServiceUnavailable (novaq.exceptions)
    └── InstanceHostDown      the instance's compute service is down
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compute.states import TaskState as T
from compute.states import VmState as V
from models import Instance
from novaq.exceptions import InstanceInvalidState, ServiceUnavailable


class InstanceIsLocked(InstanceInvalidState):
    msg_fmt = "Instance %(uuid)s is locked%(reason)s: cannot '%(action)s' it until it is unlocked."


class InstanceNotReady(InstanceInvalidState):
    msg_fmt = "Instance %(uuid)s is not ready: it has no host, cannot '%(action)s' it."


class InstanceHostDown(ServiceUnavailable):
    msg_fmt = (
        "Cannot '%(action)s' instance %(uuid)s: the compute service of its host %(host)s is down."
    )


@dataclass(frozen=True, slots=True)
class Rule:
    """Where an action is allowed. None for ``vm_states``/``task_states`` means any."""

    vm_states: frozenset[str] | None
    task_states: frozenset[str | None] | None = frozenset({None})
    must_have_launched: bool = True
    check_lock: bool = True


def _states(*names: str) -> frozenset[str]:
    return frozenset(str(n) for n in names)


def _tasks(*names: str | None) -> frozenset[str | None]:
    return frozenset(None if n is None else str(n) for n in names)


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

GATE: dict[str, Rule] = {
    # §2.3 power and lifecycle
    "stop": Rule(_states(V.ACTIVE, V.ERROR)),
    "start": Rule(_states(V.STOPPED)),
    "reboot": Rule(ALLOW_SOFT_REBOOT),
    "reboot_hard": Rule(ALLOW_HARD_REBOOT, ALLOW_REBOOT),
    "pause": Rule(_states(V.ACTIVE)),
    "unpause": Rule(_states(V.PAUSED)),
    "suspend": Rule(_states(V.ACTIVE)),
    "resume": Rule(_states(V.SUSPENDED)),
    "rescue": Rule(_states(V.ACTIVE, V.STOPPED, V.ERROR)),
    "unrescue": Rule(_states(V.RESCUED)),
    # §2.5 moves (migrate is Nova's resize without a flavor: the same decorator)
    "resize": Rule(_states(V.ACTIVE, V.STOPPED)),
    "migrate": Rule(_states(V.ACTIVE, V.STOPPED)),
    "confirm_resize": Rule(_states(V.RESIZED)),
    "revert_resize": Rule(_states(V.RESIZED)),
    # §2.4 shelve
    "shelve": Rule(_states(V.ACTIVE, V.STOPPED, V.PAUSED, V.SUSPENDED)),
    "shelve_offload": Rule(_states(V.SHELVED)),
    "unshelve": Rule(_states(V.SHELVED, V.SHELVED_OFFLOADED)),
    # §2.2 delete family: delete is allowed in any state, even never launched
    "delete": Rule(None, None, must_have_launched=False),
    "restore": Rule(_states(V.SOFT_DELETED)),
    # lock/unlock have no state check in Nova, and are the two a lock does not refuse
    "lock": Rule(None, None, must_have_launched=False, check_lock=False),
    "unlock": Rule(None, None, must_have_launched=False, check_lock=False),
}


def rule_for(action: str) -> Rule:
    try:
        return GATE[action]
    except KeyError:
        raise ValueError(f"no gate rule for action {action!r}") from None


def is_locked(instance: Instance) -> bool:
    return bool((instance.system_metadata or {}).get("locked"))


def check_instance_state(instance: Instance, action: str) -> None:
    """Refuse ``action`` on ``instance`` as Nova's API does: locked first, then vm_state,
    task_state and ``launched_at``. Raises a subclass of ``InstanceInvalidState``."""
    rule = rule_for(action)
    if rule.check_lock and is_locked(instance):
        reason = (instance.system_metadata or {}).get("locked_reason")
        raise InstanceIsLocked(
            uuid=instance.uuid,
            action=action,
            reason=f" ({reason})" if reason else "",
            vm_state=instance.vm_state,
            task_state=instance.task_state,
        )
    state: dict[str, Any] = dict(
        action=action,
        uuid=instance.uuid,
        vm_state=instance.vm_state,
        task_state=instance.task_state,
    )
    if rule.vm_states is not None and instance.vm_state not in rule.vm_states:
        raise InstanceInvalidState(**state)
    if rule.task_states is not None and instance.task_state not in rule.task_states:
        raise InstanceInvalidState(**state)
    if rule.must_have_launched and instance.launched_at is None:
        message = InstanceInvalidState.msg_fmt % state
        raise InstanceInvalidState(message[:-1] + ": it has never been launched.", **state)


def expected_task_states(action: str) -> list[str | None] | None:
    """The task_states the API's compare-and-swap accepts when it sets its own (Nova's
    ``instance.save(expected_task_state=...)``: [None], or ALLOW_REBOOT for a hard
    reboot); None when the action is allowed whatever the task_state."""
    tasks = rule_for(action).task_states
    return None if tasks is None else sorted(tasks, key=lambda t: t or "")
