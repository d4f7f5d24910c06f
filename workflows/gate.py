"""Nova's API entry gate: which vm_states and task_states allow each server action (the
``gate`` column of the operation table, ``compute.operations``), and the one function
that checks an instance against it.

The rules are Nova's ``check_instance_state`` decorators of ``nova/compute/api.py``
(NOVA_BEHAVIOUR.md §1.1, §1.7, §2.2-§2.5): ``vm_states`` None means any vm_state,
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

from typing import Any

from compute.operations import ALLOW_HARD_REBOOT, ALLOW_REBOOT, ALLOW_SOFT_REBOOT, OPERATIONS, Rule
from models import Instance
from novaq.exceptions import InstanceInvalidState, ServiceUnavailable

__all__ = ["ALLOW_HARD_REBOOT", "ALLOW_REBOOT", "ALLOW_SOFT_REBOOT", "GATE", "Rule"]


class InstanceIsLocked(InstanceInvalidState):
    msg_fmt = "Instance %(uuid)s is locked%(reason)s: cannot '%(action)s' it until it is unlocked."


class InstanceNotReady(InstanceInvalidState):
    msg_fmt = "Instance %(uuid)s is not ready: it has no host, cannot '%(action)s' it."


class InstanceHostDown(ServiceUnavailable):
    msg_fmt = (
        "Cannot '%(action)s' instance %(uuid)s: the compute service of its host %(host)s is down."
    )


#: The action name -> its rule, read from the operation table (``compute.operations``).
GATE: dict[str, Rule] = {op.action: op.gate for op in OPERATIONS.values() if op.gate is not None}


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
