"""Publishing workflows: check the broker before anything is written, publish only after
the database has committed, retry a failed publish a few times with backoff, and
translate what is left of a broker error into ``ServiceUnavailable``.

A publish that fails after the API's write is taken back by ``workflows.api.submit``;
this module only decides when the broker has failed for good.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from celery.canvas import Signature
from kombu import pools
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy.orm import Session
from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential,
)

from compute import in_flight
from compute.sessions import Sessions, sessions_for
from novaq import fault_points
from novaq.celery_app import app
from novaq.exceptions import ServiceUnavailable
from novaq.retrying import after_first_try
from novaq.settings import get_settings

LOG = logging.getLogger(__name__)

_BROKER_ERRORS: tuple[type[BaseException], ...] = (KombuOperationalError, ConnectionError, OSError)

#: How often one publish is tried, and the backoff between tries (0.2 s, 0.4 s, 0.8 s):
#: a dropped connection or a broker restarting is ridden out in about 1.5 s; a longer
#: outage is the caller's ``ServiceUnavailable`` (its write taken back) rather than an
#: API call that hangs.
PUBLISH_ATTEMPTS = 4
PUBLISH_BACKOFF_S = 0.2
PUBLISH_BACKOFF_MAX_S = 2.0
#: How long one try may spend connecting to the broker.
CONNECT_TIMEOUT_S = 3.0


#: The broker connection pool of each broker URL this process published to: kombu's
#: (``app.pool`` for the configured URL, which Celery's producer pool draws from).
#: Looked up by the URL string, since making the ``Connection`` kombu's registry is keyed
#: by costs more than a publish; emptied in a forked child, as kombu empties its own.
#: With each pool, what a publish to its broker raises when the broker fails
#: (``broker_errors``), worked out once.
_POOLS: dict[str, tuple[Any, tuple[type[BaseException], ...]]] = {}
os.register_at_fork(after_in_child=_POOLS.clear)


def _broker() -> tuple[Any, tuple[type[BaseException], ...]]:
    """The connection pool of the broker as configured now (a test may repoint it), and
    what a publish to it raises when it fails."""
    url = app.conf.broker_write_url
    found = _POOLS.get(url)
    if found is None:
        app.pool  # noqa: B018 - applies broker_pool_limit to kombu's pools first
        pool = pools.connections[app.connection_for_write()]
        found = _POOLS[url] = (pool, (*_BROKER_ERRORS, *pool.connection.channel_errors))
    return found


def _pool() -> Any:
    """The connection pool of the broker as configured now."""
    return _broker()[0]


def check_broker() -> None:
    """Fail fast, before any write, when the broker cannot be reached: its pooled
    connection, connected at the first call (no new connection per request). A broker
    lost after that fails the publish instead, whose caller takes its write back
    (``workflows.api.submit``)."""
    try:
        with _pool().acquire(block=True) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=CONNECT_TIMEOUT_S)
    except _BROKER_ERRORS as exc:
        raise ServiceUnavailable(service="message broker", reason=str(exc)) from exc


def first_task(signature: Signature) -> str:
    """The name of the task a workflow starts with (a chain's first, a group's first)."""
    tasks = getattr(signature, "tasks", None)
    while tasks:
        signature = tasks[0]
        tasks = getattr(signature, "tasks", None)
    return str(signature.task)


def broker_errors() -> tuple[type[BaseException], ...]:
    """What a publish raises when the broker fails: the connection errors (kombu wraps
    them in its ``OperationalError``) and the transport's channel errors, such as Redis
    refusing a write when it is out of memory (a full broker)."""
    return _broker()[1]


@dataclass(frozen=True, slots=True)
class Recorded:
    """The durable records of one operation written before its publish (``record``):
    what a publish that failed for good takes back."""

    instance_uuids: tuple[str, ...] = ()
    task_id: str | None = None


def record(
    session: Session,
    signature: Signature,
    task_states: Mapping[str, str | None] | None = None,
    created: bool = False,
    message: in_flight.Message | None = None,
) -> Recorded:
    """Write the record of the operation ``signature`` starts (the instances it acts on)
    in the caller's transaction, so the write that asks for the operation and its record
    commit together; then ``send(signature, recorded=...)``. ``task_states``: what the
    caller just set on each instance; ``created``: the caller created the instances in
    this transaction (``in_flight.record``); ``message``: the record, made by
    ``message_of`` before the transaction began."""
    return _write(
        session, message if message is not None else message_of(signature), task_states, created
    )


def _write(
    session: Session,
    message: in_flight.Message,
    task_states: Mapping[str, str | None] | None = None,
    created: bool = False,
) -> Recorded:
    recorded = Recorded(tuple(in_flight.instances_of(message)), in_flight.task_id_of(message))
    if recorded.instance_uuids:
        in_flight.record(session, message, task_states=task_states, created=created)
    return recorded


def send(signature: Signature, record: bool = True, recorded: Recorded | None = None) -> Any:
    """Publish ``signature``, retried ``PUBLISH_ATTEMPTS`` times with backoff; raises
    ``ServiceUnavailable`` once the broker has failed for good.

    Unless it is a query (``record=False``) or its caller wrote the record already
    (``recorded``, from ``record``), the operation's durable record
    (``compute.in_flight``) is written first, with the task ids frozen into the message,
    so the reaper can send it again should the broker lose it; a publish that failed for
    good takes its record back.

    NOTE: a publish that raised may still have reached the broker (the connection dropped
    after the broker took the message), so a retry can publish a workflow twice, and a
    publish reported failed can still run. Both are safe because every step is
    idempotent: it compare-and-swaps the task_state the API set, so a second copy, or a
    copy whose request was taken back (``workflows.api.submit``), finds the state moved
    and is ``skipped``.

    The test-only fault point ``publish:<first task>`` raising ``FaultInjected`` stands
    for a broker that failed for good (after every retry), so the undo of the caller is
    exercised deterministically.
    """
    try:
        fault_points.reach(f"publish:{first_task(signature)}")
    except fault_points.FaultInjected as exc:
        _forget(recorded)
        raise ServiceUnavailable(service="message broker", reason=str(exc)) from exc
    if recorded is None:
        recorded = _record(signature) if record else Recorded()
    errors = broker_errors()
    try:
        with _awaited(not record):
            return _publish_with_retries(signature, errors)
    except errors as exc:
        _forget(recorded)
        raise ServiceUnavailable(service="message broker", reason=str(exc)) from exc


@contextlib.contextmanager
def _awaited(awaited: bool) -> Iterator[None]:
    """Publish, with the result backend watching the task's result only when the caller
    waits for it (a query, ``record=False``).

    NOTE: Celery's ``send_task`` subscribes this process to every task's result channel
    as it publishes (the Redis backend's ``on_task_call``: a SUBSCRIBE, then an
    UNSUBSCRIBE when the ``AsyncResult`` is dropped), for a ``get()`` that an operation's
    publish never makes: about a tenth of ``send_task``'s CPU in the API (issue 16). A
    worker skips it already (``task_join_will_block``). Its result is stored all the same;
    a ``get()`` made later subscribes then and reads the stored result first. Skipped on
    the backend of this thread alone (a backend that is not thread-safe is one a thread);
    a thread-safe one, shared, is left as it is."""
    backend = app.backend
    if awaited or getattr(backend, "thread_safe", True):
        yield
        return
    shadowed = vars(backend).get("on_task_call")  # (a publish within a publish)
    backend.on_task_call = _unwatched
    try:
        yield
    finally:
        if shadowed is None:
            del backend.on_task_call
        else:
            backend.on_task_call = shadowed


def _unwatched(producer: Any, task_id: str) -> None:
    """``on_task_call`` for a result nobody waits for: no subscription."""


def _publish_with_retries(signature: Signature, errors: tuple[type[BaseException], ...]) -> Any:
    """``_publish_once`` up to ``PUBLISH_ATTEMPTS`` times. The first try is a plain call:
    a ``Retrying`` is built only after it failed (issue 16: every step's publish and
    every API call comes through here)."""
    try:
        return _publish_once(signature)
    except errors as exc:
        first = exc
    retrying = Retrying(
        stop=stop_after_attempt(PUBLISH_ATTEMPTS),
        wait=wait_exponential(multiplier=PUBLISH_BACKOFF_S, max=PUBLISH_BACKOFF_MAX_S),
        retry=retry_if_exception_type(errors),
        before_sleep=before_sleep_log(LOG, logging.WARNING),
        reraise=True,
    )
    return after_first_try(retrying, first, _publish_once, signature)


def message_of(signature: Signature) -> in_flight.Message:
    """The record of the operation ``signature`` starts (its task ids frozen into it);
    ``api.boot`` makes it before the write that ``record`` puts it in: a caller holding
    SQLite's write lock for that write then holds it for the statements alone."""
    signature.freeze()
    return in_flight.message_of_signature(json.loads(json.dumps(signature)))


def _record(signature: Signature) -> Recorded:
    """Write the record of the operation ``signature`` starts in a transaction of its own
    (none when it acts on no instance)."""
    message = message_of(signature)
    if not in_flight.instances_of(message):
        return Recorded(task_id=in_flight.task_id_of(message))
    with _sessions()() as session:
        return _write(session, message)


def _forget(recorded: Recorded | None) -> None:
    if recorded is not None and recorded.instance_uuids:
        with _sessions()() as session:
            in_flight.forget(session, list(recorded.instance_uuids), recorded.task_id)


def _publish_once(signature: Signature) -> Any:
    """One try: connect once (kombu alone would keep trying for its connect timeout, about
    6 s, on every try), then publish with Celery's own retry off, so the attempts of
    ``send`` are the whole bound."""
    with app.producer_or_acquire() as producer:
        producer.connection.ensure_connection(
            max_retries=1, interval_start=0, timeout=CONNECT_TIMEOUT_S
        )
        return signature.apply_async(producer=producer, retry=False)


def _sessions() -> Sessions:
    return sessions_for(get_settings().sqlalchemy_url)


def call(signature: Signature, timeout_s: float) -> Any:
    """Send a query to a host and wait for its answer (from the API, never from a task)."""
    result = send(signature, record=False)
    try:
        return result.get(timeout=timeout_s, propagate=True)
    finally:
        result.forget()
