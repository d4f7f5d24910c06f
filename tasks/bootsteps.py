"""The worker bootstep that makes a Celery worker a novaq service.

At start, a compute worker (one consuming ``compute.<NOVAQ_HOST>``) opens its hypervisor,
listens to its guest lifecycle events (``compute.lifecycle_events``; libvirt's event loop
runs in a thread of the worker process from the first connection on), registers or
revives its ``services`` row (with the URL of its disk endpoint, ``compute.transfer``,
which serves from a thread of the worker's main process), recovers what a crash
interrupted and records its compute node; a scheduler worker registers its row. Then
each heartbeats every ``report_interval`` on the worker's own timer (as Celery's own
worker heartbeat does), so a host is up only while it says so itself (not beat, not the
scheduler).

Neither a database nor a broker that is down at start stops a worker:

- the database work of the start waits for the database (``tasks/waiting.py``), before the
  consumer starts, so no step runs before the host's recovery (as nova-compute waits for
  its conductor before ``init_host``); a heartbeat that fails says so once and once again
  when it succeeds (Nova's "Lost connection ... Recovered");
- the compute worker's run-immediately periodic tasks are sent by a consumer bootstep,
  :class:`RunImmediately`, once the consumer is connected to the broker; Celery's consumer
  itself waits for the broker (``broker_connection_retry_on_startup``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from celery import bootsteps
from celery.worker import state as worker_state
from kombu.exceptions import KombuError

from compute import (
    in_flight,
    lifecycle_events,
    notifications,
    recovery,
    resource_tracker,
    servicegroup,
    transfer,
)
from compute.periodic import PeriodicContext
from models.db import session_scope
from novaq.exceptions import ConfigError
from tasks import context
from tasks.periodic import send_requests
from tasks.waiting import database_unreachable, until_database_answers
from virt.event import LifecycleEvent
from virt.transfer.file_server import SignedFileServer
from workflows.periodic import queue_run_immediately

LOG = logging.getLogger(__name__)

T = TypeVar("T")


class Heartbeat:
    """Reports a service every ``interval_s`` on ``timer`` (the worker's: Celery's
    ``Timer`` bootstep, or the event loop's in a worker that has one) until stopped; a
    failed report is logged and retried next time (Nova's ``model_disconnected``)."""

    def __init__(self, timer: Any, db_url: str, service_id: int, interval_s: float) -> None:
        self.timer, self.db_url, self.service_id = timer, db_url, service_id
        self.interval_s = interval_s
        self._entry: Any = None
        self._disconnected = False

    def report(self) -> None:
        try:
            servicegroup.heartbeat(self.db_url, self.service_id)
        except Exception as exc:  # noqa: BLE001 - keep reporting whatever one report hit
            if not database_unreachable(exc):
                LOG.exception("Heartbeat of service %s failed", self.service_id)
            elif not self._disconnected:  # once per outage, not a traceback per interval
                self._disconnected = True
                LOG.warning(
                    "Heartbeat of service %s failed: lost connection to the database (%s); "
                    "retrying every %g s",
                    self.service_id,
                    " ".join(str(exc).split())[:300],
                    self.interval_s,
                )
            return
        if self._disconnected:
            self._disconnected = False
            LOG.warning("Heartbeat of service %s: recovered, reporting again", self.service_id)

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


def _register(host: str, binary: str, topic: str, disk_endpoint: str | None = None) -> int:
    with session_scope(context.db_url()) as session:
        s = context.settings()
        return servicegroup.register_service(session, host, binary, topic, s, disk_endpoint).id


def _waiting(what: str, fn: Callable[[], T]) -> T:
    """``fn()`` once the database answers; a warm shutdown ends the wait."""
    return until_database_answers(what, fn, should_stop=worker_state.maybe_shutdown)


def start_compute_service(host: str, endpoint: SignedFileServer | None = None) -> int:
    """The compute host's start (Nova's ``init_host``), each database part waiting for the
    database; ``endpoint``: its disk endpoint, whose URL the registration publishes."""
    s = context.settings()
    driver = context.driver()
    driver.init_host(host)
    listen_to_lifecycle_events(host)
    url = endpoint.url if endpoint is not None else None
    service_id = _waiting(
        f"Registering compute service {host}",
        lambda: _register(host, servicegroup.COMPUTE, f"compute.{host}", url),
    )
    _waiting(
        f"Start-up recovery of {host}",
        lambda: recovery.recover_host(context.sessions(), driver, host, settings=s),
    )
    _waiting(
        f"Recording the compute node of {host}",
        lambda: resource_tracker.update_available_resource(context.sessions(), driver, host, s),
    )
    return service_id


def start_scheduler_service(host: str) -> int:
    return _waiting(
        f"Registering scheduler service {host}",
        lambda: _register(host, servicegroup.SCHEDULER, "scheduler"),
    )


def _orphan_former_deliveries(node: str) -> None:
    """Before this worker takes a message: whatever a former worker of the same Celery
    node had in flight died with it; the reaper sends those steps again at its next pass
    instead of their waiting out the broker's visibility timeout (compute/in_flight.py)."""
    count = _waiting(
        f"Looking for steps a former {node} left in flight",
        lambda: in_flight.orphan_deliveries(context.sessions(), node),
    )
    if count:
        LOG.warning("%d step(s) a former %s had in flight will be sent again", count, node)


class NovaqServiceStep(bootsteps.StartStopStep):
    # The Timer step makes ``worker.timer``, which the heartbeats run on.
    requires = {"celery.worker.components:Timer", "celery.worker.components:Pool"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self.heartbeats: list[Heartbeat] = []
        self.disk_endpoint: SignedFileServer | None = None

    def start(self, worker: Any) -> None:
        s = context.settings()
        if s.notifications.versioned:
            app = worker.app
            notifications.install(notifications.kombu_publisher(lambda: app.producer_pool))
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
            # Serving before registering: the URL published is one that answers.
            self.disk_endpoint = transfer.start_disk_endpoint(s, context.driver().instances_path)
            services.append(start_compute_service(s.host, self.disk_endpoint))
            LOG.info("Compute service on %s started", s.host)
        if "scheduler" in queues:
            services.append(start_scheduler_service(s.host))
        # Still before the consumer takes a message.
        _orphan_former_deliveries(worker.hostname)
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
        if self.disk_endpoint is not None:
            self.disk_endpoint.close()
            self.disk_endpoint = None


class RunImmediately(bootsteps.StartStopStep):
    """A consumer bootstep: a compute worker's run-immediately periodic tasks (Nova runs
    them at a service's first tick) are sent once per worker process, when its consumer
    has connected to the broker.

    The consumer (re)starts its steps at every connection, so a send that fails (the
    broker went away again) is tried at the next one; the worker never dies of it.
    Sending from the worker's own start instead killed a worker that started while the
    broker was down (``OperationalError`` from the publish, before the consumer's own
    connection retry had a chance).
    """

    requires = {"celery.worker.consumer.connection:Connection"}

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.host: str | None = None
        if c.controller is not None and any(
            q.startswith("compute.") for q in consumed_queues(c.controller)
        ):
            self.host = context.settings().host
        self._warned = False

    def start(self, c: Any) -> None:
        if self.host is None:
            return
        try:
            sent = queue_run_immediately(self.host)
        except (KombuError, OSError) as exc:
            level = logging.DEBUG if self._warned else logging.WARNING
            self._warned = True
            LOG.log(
                level,
                "Run-immediately periodic tasks of %s not sent (%s); trying again at the "
                "next connection to the broker",
                self.host,
                exc,
            )
            return
        except Exception:  # noqa: BLE001 - periodic tasks are not worth the worker
            LOG.exception("Run-immediately periodic tasks of %s not sent", self.host)
        else:
            LOG.info("Run-immediately periodic tasks of %s sent: %s", self.host, sent)
        self.host = None  # once per process, as each nova-compute does at its start
