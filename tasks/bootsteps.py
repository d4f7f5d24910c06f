"""The worker bootstep that makes a Celery worker a novaq service.

At start, a compute worker (one consuming ``compute.<NOVAQ_HOST>``) opens its hypervisor,
listens to its guest lifecycle events (``compute.lifecycle_events``; libvirt's event loop
runs in a thread of the worker process from the first connection on), registers or
revives its ``services`` row and records its compute node; a scheduler
worker registers its row. Then each heartbeats every ``report_interval`` on the worker's
own timer (as Celery's own worker heartbeat does), so a host is up only while it says so
itself (not beat, not the scheduler).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps

from compute import lifecycle_events, notifications, recovery, resource_tracker, servicegroup
from compute.periodic import PeriodicContext
from models.db import session_scope
from novaq.exceptions import ConfigError
from tasks import context
from tasks.periodic import send_requests
from virt.event import LifecycleEvent
from workflows.periodic import queue_run_immediately

LOG = logging.getLogger(__name__)


class Heartbeat:
    """Reports a service every ``interval_s`` on ``timer`` (the worker's: Celery's
    ``Timer`` bootstep, or the event loop's in a worker that has one) until stopped; a
    failed report is logged and retried next time (Nova's ``model_disconnected``)."""

    def __init__(self, timer: Any, db_url: str, service_id: int, interval_s: float) -> None:
        self.timer, self.db_url, self.service_id = timer, db_url, service_id
        self.interval_s = interval_s
        self._entry: Any = None

    def report(self) -> None:
        try:
            with session_scope(self.db_url) as session:
                servicegroup.heartbeat(session, self.service_id)
        except Exception:  # noqa: BLE001 - keep reporting whatever one report hit
            LOG.exception("Heartbeat of service %s failed", self.service_id)

    def start(self) -> None:
        self._entry = self.timer.call_repeatedly(self.interval_s, self.report)

    def stop(self) -> None:
        if self._entry is not None:
            self.timer.cancel(self._entry)
            self._entry = None


def consumed_queues(worker: Any) -> set[str]:
    consume_from = worker.app.amqp.queues.consume_from
    if consume_from is None:
        return set(worker.app.amqp.queues)
    return set(consume_from)


def listen_to_lifecycle_events(host: str) -> bool:
    """Nova's ``init_host``: with ``[workarounds] handle_virt_lifecycle_events``, the
    hypervisor's guest lifecycle events sync power states as they happen
    (``compute.lifecycle_events``). True when listening."""
    s = context.settings()
    if not s.workarounds.handle_virt_lifecycle_events:
        LOG.info("Compute service on %s ignores hypervisor lifecycle events", host)
        return False

    def on_event(event: LifecycleEvent) -> None:
        ctx = PeriodicContext(context.sessions(), s, host, context.driver())
        outcome = lifecycle_events.handle_lifecycle_event(ctx, event)
        send_requests(ctx, {outcome: [event.uuid]})  # the power sync's stop, if it asked

    context.driver().register_event_listener(on_event)
    return True


def start_compute_service(host: str) -> int:
    s = context.settings()
    driver = context.driver()
    driver.init_host(host)
    listen_to_lifecycle_events(host)
    with session_scope(context.db_url()) as session:
        service_id = servicegroup.register_service(
            session, host, servicegroup.COMPUTE, f"compute.{host}", s
        ).id
    recovery.recover_host(context.sessions(), driver, host, settings=s)
    resource_tracker.update_available_resource(context.sessions(), driver, host, s)
    return service_id


def start_scheduler_service(host: str) -> int:
    with session_scope(context.db_url()) as session:
        service = servicegroup.register_service(
            session, host, servicegroup.SCHEDULER, "scheduler", context.settings()
        )
        return service.id


class NovaqServiceStep(bootsteps.StartStopStep):
    # The Timer step makes ``worker.timer``, which the heartbeats run on.
    requires = {"celery.worker.components:Timer", "celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.heartbeats: list[Heartbeat] = []

    def start(self, worker: Any) -> None:
        s = context.settings()
        if s.notifications.versioned:
            notifications.install(notifications.kombu_publisher(worker.app.connection_for_write))
        queues = consumed_queues(worker)
        computes = {q for q in queues if q.startswith("compute.")}
        services = []
        if computes:
            if computes != {f"compute.{s.host}"}:
                raise ConfigError(
                    option="NOVAQ_HOST",
                    reason=f"a compute worker consumes compute.<its host> only; host is "
                    f"{s.host!r} but the queues are {sorted(computes)}",
                )
            services.append(start_compute_service(s.host))
            queue_run_immediately(s.host)
            LOG.info("Compute service on %s started", s.host)
        if "scheduler" in queues:
            services.append(start_scheduler_service(s.host))
        for service_id in services:
            beat = Heartbeat(worker.timer, context.db_url(), service_id, s.report_interval)
            beat.start()
            self.heartbeats.append(beat)

    def stop(self, worker: Any) -> None:
        notifications.install(None)
        if any(q.startswith("compute.") for q in consumed_queues(worker)):
            context.driver().register_event_listener(None)
        for beat in self.heartbeats:
            beat.stop()
        self.heartbeats.clear()
