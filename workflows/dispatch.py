"""Publishing workflows: check the broker before anything is written, translate broker
errors into ``ServiceUnavailable``, enqueue only after the database has committed."""

from __future__ import annotations

from typing import Any

from celery.canvas import Signature
from kombu.exceptions import OperationalError as KombuOperationalError

from novaq import fault_points
from novaq.celery_app import app
from novaq.exceptions import ServiceUnavailable

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


def send(signature: Signature) -> Any:
    fault_points.reach(f"publish:{first_task(signature)}")
    try:
        return signature.apply_async()
    except _BROKER_ERRORS as exc:
        raise ServiceUnavailable(service="message broker", reason=str(exc)) from exc


def call(signature: Signature, timeout_s: float) -> Any:
    """Send a query to a host and wait for its answer (from the API, never from a task)."""
    result = send(signature)
    try:
        return result.get(timeout=timeout_s, propagate=True)
    finally:
        result.forget()
