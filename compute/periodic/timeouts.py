"""The timeouts of a compute host (NOVA_BEHAVIOUR.md §7.2): Nova's
``_check_instance_build_time``, ``_poll_rebooting_instances`` and
``_poll_rescued_instances``. Each finds the servers stuck in one state on this host longer
than its option allows and moves them on (``compute.periodic.passes`` has the rules they
share). Rescue goes through the public API as Nova's does (``ctx.request``); the others act on
the host itself, as Nova's do.

Where novaq deliberately differs from Nova:

- A timed-out build is errored out as every failed build in novaq is
  (``compute.build.fail_build``): claim released, task cleared, host and node nulled, a
  fault. Nova only sets ERROR and the allocation stays until the server is deleted.
- A stuck soft reboot is finished (ACTIVE, or rebooted hard): Nova's libvirt driver
  does nothing in ``poll_rebooting_instances``, leaving the server in REBOOT.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from compute import instance_actions as actions
from compute import lifecycle
from compute.build import destroy_quietly, fail_build
from compute.instance_state import cas_update
from compute.periodic import PeriodicContext
from compute.periodic.passes import (
    ERRORED,
    FAILED,
    cutoff_for,
    each,
    host_instances,
    latest_request_id,
    locked_here,
)
from compute.states import TaskState, VmState
from compute.steps import StepContext
from models import Instance
from novaq.exceptions import BuildAbortError
from virt import power_state

LOG = logging.getLogger(__name__)

#: Events named as Nova's ``wrap_instance_event(prefix="compute")`` names a method's.
BUILD_TIMEOUT_EVENT = "compute__check_instance_build_time"
REBOOT_POLL_EVENT = "compute__poll_rebooting_instances"
#: What the passes report, each a list of uuids.
FINISHED, REBOOTED_HARD, UNRESCUED = "finished", "rebooted_hard", "unrescued"


def check_instance_build_time(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_check_instance_build_time``: this host's instances still BUILDING more
    than ``instance_build_timeout`` seconds after they were created go to ERROR.

    Every BUILDING instance with this host counts, whatever its task: ``spawning`` (a
    spawn that hangs) as well as ``scheduling`` (the scheduler chose and claimed this host
    but the build message never ran), as Nova's filter is only vm_state and host.

    Deliberate difference (see the module docstring): the build is errored out by
    ``fail_build``, novaq's one undo of a build: claim and PCI devices released, task
    cleared, host/node nulled, a fault and a ``compute__check_instance_build_time`` Error
    event on the create action. Nova leaves the task, the host and the allocation and
    records no fault; an ERROR server that holds a claim for a guest that never ran would
    leak capacity until deleted. Then any guest the build left here is destroyed; a spawn
    still running finds the state moved on and takes its own guest down.
    """
    timeout = ctx.settings.instance_build_timeout
    if timeout <= 0:
        return {ERRORED: [], FAILED: []}
    due = host_instances(
        ctx, Instance.vm_state == VmState.BUILDING, Instance.created_at < cutoff_for(timeout)
    )
    return each(due, (ERRORED,), ctx.host, lambda uuid: _time_out_build(ctx, uuid, timeout))


def _time_out_build(ctx: PeriodicContext, uuid: str, timeout: int) -> str | None:
    with ctx.sessions() as session:
        request_id = latest_request_id(session, uuid)
    error = BuildAbortError(uuid=uuid, reason=f"build timed out after {timeout} s")
    # NOTE: fail_build re-checks BUILDING under the row lock: a build that finished since
    # the query is left alone (False), and its guest with it.
    if not fail_build(
        ctx.sessions, uuid, request_id, error, host=ctx.host, event=BUILD_TIMEOUT_EVENT
    ):
        return None
    LOG.warning("Instance %s on %s: build timed out. Set to error state.", uuid, ctx.host)
    destroy_quietly(ctx.hypervisor, uuid)
    return ERRORED


def poll_rebooting_instances(ctx: PeriodicContext) -> dict[str, Any]:
    """Soft reboots of this host stuck longer than ``reboot_timeout`` (their ``updated_at``,
    as Nova's ``instance_get_all_hung_in_rebooting``) are finished. Nova hands them to the
    driver, and libvirt's does nothing; novaq does better:

    - guest running: the reboot happened (or did not matter): ACTIVE (RESCUED stays
      RESCUED, as a reboot leaves it), task None, compare-and-swap from the soft-reboot
      task_states, and a ``compute__poll_rebooting_instances`` event on the reboot action;
    - guest not running: the same event, task ``rebooting_hard`` (what a hard reboot
      request sets), then ``compute.lifecycle.reboot_instance(hard=True)``: the driver's
      hard reboot, ACTIVE, its ``compute_reboot_instance`` event; if that fails too the
      server goes to ERROR with a fault, as any failed reboot that leaves no guest running.
    """
    timeout = ctx.settings.reboot_timeout
    if timeout <= 0:
        return {FINISHED: [], REBOOTED_HARD: [], FAILED: []}
    cutoff = cutoff_for(timeout)
    due = host_instances(
        ctx, Instance.task_state.in_(lifecycle.REBOOT.tasks), Instance.updated_at < cutoff
    )
    return each(
        due, (FINISHED, REBOOTED_HARD), ctx.host, lambda uuid: _end_reboot(ctx, uuid, cutoff)
    )


def _end_reboot(ctx: PeriodicContext, uuid: str, cutoff: dt.datetime) -> str | None:
    if lifecycle.guest_power_state(ctx.hypervisor, uuid) == power_state.RUNNING:
        if _take_stuck_reboot(ctx, uuid, cutoff, _rebooted) is None:
            return None
        LOG.info("Instance %s on %s: stuck reboot finished, guest running", uuid, ctx.host)
        return FINISHED
    request_id = _take_stuck_reboot(
        ctx, uuid, cutoff, lambda _: {"task_state": TaskState.REBOOTING_HARD}, finish=False
    )
    if request_id is None:
        return None
    LOG.warning(
        "Instance %s on %s: stuck reboot, guest not running: rebooting hard", uuid, ctx.host
    )
    step = StepContext(ctx.sessions, ctx.hypervisor, ctx.host, request_id)
    outcome = lifecycle.reboot_instance(step, uuid, hard=True)
    return REBOOTED_HARD if outcome == lifecycle.DONE else None


def _rebooted(instance: Instance) -> dict[str, Any]:
    vm_state = VmState.RESCUED if instance.vm_state == VmState.RESCUED else VmState.ACTIVE
    return {"vm_state": vm_state, "task_state": None, "power_state": power_state.RUNNING}


def _take_stuck_reboot(
    ctx: PeriodicContext,
    uuid: str,
    cutoff: dt.datetime,
    values: Callable[[Instance], dict[str, Any]],
    finish: bool = True,
) -> str | None:
    """Under the row lock, if the soft reboot is still stuck: the compare-and-swap to
    ``values`` and the event. The reboot action's request id, or None if it moved on."""
    with ctx.sessions() as session:
        instance = locked_here(session, ctx, uuid)
        if instance is None or instance.task_state not in lifecycle.REBOOT.tasks:
            return None
        if instance.updated_at is None or instance.updated_at >= cutoff:
            return None  # the reboot made progress since the query
        cas_update(session, uuid, expected_task_state=lifecycle.REBOOT.tasks, **values(instance))
        request_id = latest_request_id(session, uuid)
        actions.record_event(
            session, uuid, request_id, REBOOT_POLL_EVENT, ctx.host, finish_action=finish
        )
        return request_id


def poll_rescued_instances(ctx: PeriodicContext) -> dict[str, Any]:
    """Nova's ``_poll_rescued_instances``: servers of this host RESCUED for longer than
    ``rescue_timeout`` are unrescued through the API (``api.unrescue``: gate, action
    ``unrescue``, the host step), as Nova calls ``compute_api.unrescue``.

    "Rescued for" is measured from ``launched_at``, as in Nova: novaq's rescue stamps it,
    as Nova's ``rescue_instance`` resets it. Only servers with no task in flight are
    candidates (the API would refuse the others; Nova's pass then stopped on the error).
    A refusal (a locked server, a host the API sees down) is logged and retried next run.
    """
    timeout = ctx.settings.rescue_timeout
    if timeout <= 0:
        return {UNRESCUED: [], FAILED: []}
    due = host_instances(
        ctx,
        Instance.vm_state == VmState.RESCUED,
        Instance.task_state.is_(None),
        Instance.launched_at < cutoff_for(timeout),
    )

    def unrescue(uuid: str) -> str:
        LOG.info("Instance %s on %s: rescued past rescue_timeout, unrescuing", uuid, ctx.host)
        return ctx.request("unrescue", uuid, UNRESCUED, "Unrescue of instance %s refused")

    return each(due, (UNRESCUED,), ctx.host, unrescue)
