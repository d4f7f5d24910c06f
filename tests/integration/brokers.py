"""The integration tier on each broker: the same test bodies on Redis and on RabbitMQ.

A test that takes the ``broker`` fixture runs on the tier's Redis (database
``REDIS_DB``, the tier's PostgreSQL database); marked ``@on_both_brokers`` it runs a
second time on RabbitMQ: a vhost, a PostgreSQL database and a state directory of its own,
made once per session on first use and removed at the end of the session. The
``deployment`` fixture adds the cluster of that broker: ``two_hosts`` on Redis, a
scheduler and compute workers for host1 and host2 of its own on RabbitMQ. During such a test this
process (the API side: ``workflows.api``, the Celery app) is pointed at that deployment
and pointed back afterwards (:func:`pointed_at`).

RabbitMQ is 127.0.0.1:5672, guest/guest (``NOVAQ_IT_RABBITMQ_URL`` names another);
vhosts are made and removed with ``rabbitmqctl`` (the tier runs as root, as CI does), named
``<NOVAQ_IT_RABBITMQ_VHOST_PREFIX, default novaq_it>_<redis db>_<pid>``. A RabbitMQ that
cannot be reached or administered skips those runs locally and fails them in CI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.integration.workers import Cluster

REDIS, RABBITMQ = "redis", "rabbitmq"
RABBITMQ_URL = os.environ.get("NOVAQ_IT_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672")
VHOST_PREFIX = os.environ.get("NOVAQ_IT_RABBITMQ_VHOST_PREFIX", "novaq_it")


#: ``@on_both_brokers``: run the test on Redis and on RabbitMQ.
on_both_brokers = pytest.mark.parametrize("broker", [REDIS, RABBITMQ], indirect=True)


@dataclass
class Broker:
    """The broker a test runs on, and the database that goes with it."""

    name: str
    url: str
    db_url: str
    #: The number of ready messages in one of its queues.
    queue_length: Callable[[str], int]


@dataclass
class Deployment:
    """A broker with its cluster (a scheduler, compute workers for host1 and host2)."""

    broker: Broker
    cluster: Cluster

    @property
    def db_url(self) -> str:
        return self.broker.db_url


def skip_or_fail(message: str) -> None:
    """A server the tier needs is missing: skip locally, fail in CI (CI=true)."""
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_rabbitmq() -> None:
    """Skip (locally) or fail (CI=true) unless RabbitMQ answers and ``rabbitmqctl`` works."""
    problem = _rabbitmq_problem()
    if problem:
        skip_or_fail(f"the RabbitMQ runs need {problem}")


def _rabbitmq_problem() -> str:
    parts = urlsplit(RABBITMQ_URL)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5672), 2):
            pass
    except OSError:
        return f"RabbitMQ on {parts.hostname}:{parts.port or 5672}"
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl on the PATH"
    try:
        _rabbitmqctl("list_vhosts")
    except (subprocess.SubprocessError, OSError) as exc:
        return f"rabbitmqctl to work (as root, on the broker's machine): {exc}"
    return ""


def _rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def rabbitmq_vhost(name: str) -> Iterator[str]:
    """A fresh vhost that the URL's user may use; its broker URL. Deleted at the end."""
    user = urlsplit(RABBITMQ_URL).username or "guest"
    with contextlib.suppress(subprocess.CalledProcessError):
        _rabbitmqctl("delete_vhost", name)  # a stale one of an interrupted run
    _rabbitmqctl("add_vhost", name)
    try:
        _rabbitmqctl("set_permissions", "-p", name, user, ".*", ".*", ".*")
        yield f"{RABBITMQ_URL.rstrip('/')}/{name}"
    finally:
        _rabbitmqctl("delete_vhost", name)


def amqp_queue_length(broker_url: str) -> Callable[[str], int]:
    """Ready messages in a queue, asked of the broker (0 for a queue not declared yet)."""
    from kombu import Connection

    def length(queue: str) -> int:
        with Connection(broker_url, connect_timeout=5) as connection:
            channel = connection.channel()
            try:
                return int(channel.queue_declare(queue, passive=True).message_count)
            except connection.channel_errors:  # NOT_FOUND: nothing was ever sent there
                return 0

    return length


def redis_queue_length(db: int) -> Callable[[str], int]:
    import redis

    client = redis.Redis(host="127.0.0.1", port=6379, db=db)
    return lambda queue: int(client.llen(queue))


@contextlib.contextmanager
def pointed_at(env: dict[str, str]) -> Iterator[None]:
    """This process's settings (``NOVAQ_*`` variables ``env`` names) and Celery app (its
    broker and everything that depends on it: ``novaq.broker_options``) switched to
    another deployment, then back."""
    from novaq.settings import get_settings

    saved_env = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    get_settings.cache_clear()
    saved_conf = _point_app_at(get_settings())
    try:
        yield
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()
        _reconfigure(saved_conf)


def _point_app_at(settings: Any) -> dict[str, Any]:
    from novaq.broker_options import broker_options
    from novaq.celery_app import app

    url = settings.broker_url
    conf = {"broker_url": url, **broker_options(url, settings.result_backend, settings.celery)}
    saved = {name: app.conf.get(name) for name in conf}
    _reconfigure(conf)
    return saved


def _reconfigure(conf: dict[str, Any]) -> None:
    from novaq.celery_app import app

    _close_result_consumer(app)
    app.conf.update(conf)
    # What Celery caches per broker or backend (as ``app._after_fork`` drops them): the
    # connection pool, the producers, the queues (their type) and the result backend.
    app._pool = None
    app.__dict__.pop("amqp", None)
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)


def _close_result_consumer(app: Any) -> None:
    """The connection the ``rpc://`` backend of this thread keeps to read results on."""
    backend = app._local.__dict__.get("backend") or app._backend_cache
    connection = getattr(getattr(backend, "result_consumer", None), "_connection", None)
    if connection is not None:
        connection.close()


def close_connections(env: dict[str, str]) -> None:
    """Close this process's pooled connections to ``env``'s broker (at the end of the
    session: kombu keeps a broker's pools in a registry of its own, and hands the same
    ones back whenever the app is pointed at that broker again)."""
    from novaq.celery_app import app

    with pointed_at(env):
        app.pool.force_close_all()
        app.amqp.producer_pool.force_close_all()


def rabbitmq_state(root: Path) -> Path:
    """The RabbitMQ deployment's own state directory (instances, images, logs)."""
    state = root / "amqp"
    state.mkdir(parents=True, exist_ok=True)
    return state


__all__ = [
    "RABBITMQ",
    "REDIS",
    "Broker",
    "Deployment",
    "amqp_queue_length",
    "close_connections",
    "on_both_brokers",
    "pointed_at",
    "rabbitmq_state",
    "rabbitmq_vhost",
    "redis_queue_length",
    "require_rabbitmq",
    "skip_or_fail",
]
