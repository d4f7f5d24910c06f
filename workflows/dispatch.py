"""Publishing workflows: check the broker before anything is written, translate broker
errors into ``ServiceUnavailable``, enqueue only after the database has committed."""

from __future__ import annotations

import json
from typing import Any

from celery.canvas import Signature
from kombu.exceptions import OperationalError as KombuOperationalError

from compute import in_flight
from compute.sessions import Sessions, sessions_for
from novaq import fault_points
from novaq.celery_app import app
from novaq.exceptions import ServiceUnavailable
from novaq.settings import get_settings

_BROKER_ERRORS = (KombuOperationalError, ConnectionError, OSError)


def check_broker() -> None:
    """Fail fast, before any write, when the broker cannot be reached."""
    try:
        with app.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=3)
    except _BROKER_ERRORS as exc:
        raise ServiceUnavailable(service="message broker", reason=str(exc)) from exc


def first_task(signature: Signature) -> str:
    """The name of the task a workflow starts with (a chain's first, a group's first)."""
    tasks = getattr(signature, "tasks", None)
    while tasks:
        signature = tasks[0]
        tasks = getattr(signature, "tasks", None)
    return str(signature.task)


def send(signature: Signature, record: bool = True) -> Any:
    """Publish a workflow. Unless it is a query (``record=False``), the operation's
    durable record (``compute.in_flight``) is written first, with the task ids frozen
    into the message, so the reaper can send it again should the broker lose it."""
    fault_points.reach(f"publish:{first_task(signature)}")
    recorded: list[str] = []
    task_id: str | None = None
    if record:
        signature.freeze()
        message = in_flight.message_of_signature(json.loads(json.dumps(signature)))
        recorded = in_flight.instances_of(message)
        task_id = in_flight.task_id_of(message)
        if recorded:
            with _sessions()() as session:
                in_flight.record(session, message)
    try:
        return signature.apply_async()
    except _BROKER_ERRORS as exc:
        if recorded:
            with _sessions()() as session:
                in_flight.forget(session, recorded, task_id)
        raise ServiceUnavailable(service="message broker", reason=str(exc)) from exc


def _sessions() -> Sessions:
    return sessions_for(get_settings().sqlalchemy_url)


def call(signature: Signature, timeout_s: float) -> Any:
    """Send a query to a host and wait for its answer (from the API, never from a task)."""
    result = send(signature, record=False)
    try:
        return result.get(timeout=timeout_s, propagate=True)
    finally:
        result.forget()
