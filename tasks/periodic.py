"""Beat-driven maintenance (the tasks ``compute/periodic/schedule.py`` lists).

Beat publishes one message per due entry. A per-host task's entry is ``periodic.fan_out``
on the maintenance queue: it sends the task to every up and enabled compute host, each
message with ``expires`` = the spacing, so a host that went down after the fan-out looked
does not find a pile of stale ticks when it comes back (CELERY_RELIABILITY.md §2.8). A
cluster task's entry is the task itself, on the maintenance queue.

Every periodic task is the same thin wrapper: check it runs on its host, close early
when its gate option is off (Nova's early return), take the (task, host) lease so two runs
never overlap, run the body, record the run. Periodic steps ack early and are not counted:
a lost tick is replaced by the next one, a redelivered one would only run late.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

from compute.periodic import PeriodicContext, runs
from compute.periodic.passes import FAILED
from compute.periodic.schedule import CLUSTER, PERIODIC_TASKS, PeriodicTask
from novaq.celery_app import app
from tasks import context
from tasks.compute import check_host
from workflows import api
from workflows.periodic import schedulable_hosts, send_to_host

LOG = logging.getLogger(__name__)


@app.task(name="periodic.fan_out", acks_late=False, count_deliveries=False, ignore_result=True)
def fan_out(task_name: str, expires_s: float) -> list[str]:
    hosts = schedulable_hosts()
    for host in hosts:
        send_to_host(task_name, host, expires_s)
    return hosts


def _function(task: PeriodicTask) -> Callable[[PeriodicContext], dict[str, Any]]:
    module, _, name = task.function.partition(":")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]


def run_periodic(task: PeriodicTask, host: str, runner: str) -> dict[str, Any]:
    """One pass of ``task`` on ``host`` (or the cluster), leased and recorded."""
    s = context.settings()
    sessions = context.sessions()
    reason = task.gate_reason(s)
    if reason is not None:
        runs.record_skip(sessions, task.name, host, reason)
        return {"skipped": reason}
    stale_after = max(s.celery.visibility_timeout, task.effective_spacing(s) or 0)
    if not runs.begin(sessions, task.name, host, runner, stale_after):
        LOG.info("%s on %s: the previous run is still going; skipped", task.name, host)
        return {"skipped": "previous run still running"}
    ctx = PeriodicContext(
        sessions=sessions,
        settings=s,
        host=host,
        driver=context.driver() if task.per_host else None,
    )
    try:
        result = run_pass(_function(task), ctx)
    except Exception as exc:
        runs.finish(
            sessions, task.name, host, runner, runs.ERROR, error=f"{type(exc).__name__}: {exc}"
        )
        raise
    runs.finish(sessions, task.name, host, runner, runs.OK, result)
    return result


def run_pass(
    body: Callable[[PeriodicContext], dict[str, Any]], ctx: PeriodicContext, through: Any = api
) -> dict[str, Any]:
    """Run the pass, then send the operations it asked for through the public API
    (``through``: ``workflows.api``, or a stand-in recording the calls in a test)."""
    result = body(ctx)
    send_requests(ctx, result, through)
    return result


def send_requests(ctx: PeriodicContext, summary: dict[str, Any], through: Any = api) -> None:
    """Each request as Nova's periodic task makes it: one API call; a refusal is logged
    and the instance listed under ``failed`` instead (the next pass tries again)."""
    for request in ctx.requests:
        try:
            getattr(through, request.action)(request.instance_uuid)
        except Exception:  # noqa: BLE001 - refused now, retried next pass (as Nova's)
            LOG.exception(request.refused, request.instance_uuid)
            _move(summary, request.listed, request.outcome, FAILED)
    ctx.requests.clear()


def _move(summary: dict[str, Any], listed: str, outcome: str, to: str) -> None:
    under = summary.get(outcome)
    if isinstance(under, list) and listed in under:
        under.remove(listed)
        summary.setdefault(to, []).append(listed)


def _runner(task_id: str | None) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{task_id}"


def _celery_task(task: PeriodicTask) -> Any:
    """The Celery task of ``task``: takes the host it was sent to, or none for a
    cluster task."""
    if task.scope == CLUSTER:

        def run(self: Any) -> dict[str, Any]:
            return run_periodic(task, CLUSTER, _runner(self.request.id))
    else:

        def run(self: Any, host: str) -> dict[str, Any]:  # type: ignore[misc]
            check_host(host)
            return run_periodic(task, host, _runner(self.request.id))

    run.__name__ = run.__qualname__ = task.name.lstrip("_")
    run.__doc__ = task.doc
    return app.task(name=task.task_name, bind=True, acks_late=False, count_deliveries=False)(run)


TASKS = {t.name: _celery_task(t) for t in PERIODIC_TASKS}
