"""Compute-queue tasks (``compute.<host>``): each unpacks ids, checks it runs on the host
it was routed to, and calls one function of ``compute/``."""

from __future__ import annotations

from typing import Any

from compute import build, delete, operations, resource_tracker
from models.alternate import load_alternates
from novaq.celery_app import app
from novaq.exceptions import ConfigError
from scheduler.request_spec import Selection
from tasks import context
from workflows import dispatch
from workflows.build import build_step


def check_host(host: str) -> None:
    # A message on the wrong host's queue would act on the wrong hypervisor.
    if host != context.settings().host:
        raise ConfigError(
            option="NOVAQ_HOST",
            reason=f"this worker is {context.settings().host!r} but got a step for {host!r}",
        )


# The delivery's start rides the build's begin, its end the build's finish
# (``compute.delivery_ledger``): the build costs its two transactions and no more.
@app.task(
    name="compute.build_and_run_instance", delivery_rides=True, done_outcome=build.DONE_OUTCOME
)
def build_and_run_instance(
    instance_uuid: str,
    request_id: str,
    host: str,
    node: str,
    attempt: int = 1,
    max_attempts: int = 1,
    alternates: list[list[Any]] | None = None,
) -> dict[str, Any]:
    check_host(host)
    tries = build.BuildAttempt(
        number=attempt,
        max_attempts=max_attempts,
        alternates=load_alternates(alternates),
    )
    threshold = context.settings().compute.consecutive_build_service_disable_threshold
    ctx = context.step_context(request_id, host)
    result = build.build_and_run_instance(
        ctx, instance_uuid, tries, track_failures=threshold != 0, notify=True
    )
    if result.outcome == "rescheduled" and result.next_host is not None:
        next_host, next_node, next_id = result.next_host
        selection = Selection(next_host, next_node, next_id, result.alternates, instance_uuid)
        dispatch.send(build_step(request_id, selection, max_attempts, attempt + 1))
    return result.to_dict()


@app.task(name="compute.terminate_instance", delivery_rides=True, done_outcome=delete.DONE_OUTCOME)
def terminate_instance(instance_uuid: str, request_id: str, host: str) -> dict[str, str]:
    check_host(host)
    ctx = context.step_context(request_id, host)
    notification = operations.operation("delete").notification or "delete"
    outcome = delete.terminate_instance(ctx, instance_uuid, notification)
    return {"instance_uuid": instance_uuid, "outcome": outcome}


@app.task(name="compute.get_diagnostics", acks_late=False, count_deliveries=False)
def get_diagnostics(instance_uuid: str, host: str) -> dict[str, Any]:
    """The hypervisor's live view of one guest (a query: early ack, nothing to redo)."""
    check_host(host)
    return context.driver().get_info(instance_uuid).to_dict()


@app.task(name="compute.get_console_output", acks_late=False, count_deliveries=False)
def get_console_output(instance_uuid: str, host: str, length: int | None = None) -> str:
    """The tail of the guest's console log on this host (a query, as ``get_diagnostics``)."""
    check_host(host)
    return context.driver().get_console_output(instance_uuid, length)


@app.task(name="compute.hypervisor_view", acks_late=False, count_deliveries=False)
def hypervisor_view(host: str) -> dict[str, Any]:
    """What the hypervisor itself reports (for the audit): totals and every guest."""
    check_host(host)
    driver = context.driver()
    domains = resource_tracker.hypervisor_domains(driver)
    return {
        "host": host,
        "resources": driver.get_available_resource().to_dict(),
        "domains": [
            {"uuid": d.uuid, "vcpus": d.vcpus, "memory_mb": d.memory_mb} for d in domains.values()
        ],
    }
