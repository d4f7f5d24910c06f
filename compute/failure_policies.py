"""What a failed host step does to the instance's vm_state (Nova's decorators of
``ComputeManager``): a ``Step`` names one as its ``on_failure``."""

from __future__ import annotations

from collections.abc import Callable

from compute.states import VmState

#: What a failure does to vm_state: given the error and the vm_state at the start, the
#: vm_state to set, or None to leave it.
FailurePolicy = Callable[[BaseException, str], str | None]


def keep_vm_state(exc: BaseException, vm_state: str) -> str | None:
    """Nova's ``reverts_task_state``: task None, vm_state as it was."""
    return None


def error(exc: BaseException, vm_state: str) -> str | None:
    return VmState.ERROR


def error_unless_not_implemented(fallback: str | None) -> FailurePolicy:
    """Nova's ``_error_out_instance_on_exception``: ERROR, but a ``NotImplementedError``
    leaves the instance in ``fallback`` (the vm_state it had when None)."""

    def decide(exc: BaseException, vm_state: str) -> str | None:
        if isinstance(exc, NotImplementedError):
            return fallback or vm_state
        return VmState.ERROR

    return decide
