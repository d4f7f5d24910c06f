"""The Celery settings that depend on the broker novaq's URL names: Redis or RabbitMQ.

``celeryconfig`` takes them from :func:`broker_options`; the integration tier uses the
same function to point a process at a RabbitMQ vhost. What each setting is for, and what
it means for a deployment: docs/reliability.md ("RabbitMQ").

Redis (``redis://``, ``rediss://``; and any other transport, such as the unit tier's
``memory://``): the visibility timeout in the three places Celery reads it, kombu 5.7's
sweep of unacknowledged messages, novaq's Redis transport (``novaq.redis_transport``),
and the broker as result backend.

RabbitMQ (``amqp://``, ``amqps://``, ``pyamqp://``):

- every task queue (``scheduler``, ``maintenance``, each ``compute.<host>``) is a durable
  **quorum queue** (``task_default_queue_type``, ``task_create_missing_queue_type``):
  replicated on a RabbitMQ cluster, and Celery then turns global QoS off by itself
  (``worker_detect_quorum_queues``). novaq sends no countdown or ETA; a task that did would
  go through Celery's native delayed delivery (``celery_delayed_*`` exchanges), which needs
  topic exchanges where novaq's queues have direct ones: Celery would then warn and the
  worker would hold the message until its ETA, as on Redis;
- **publisher confirms** (``confirm_publish``): a publish returns once the broker has the
  message, so the API's "publish retried until the broker confirms" holds;
- no visibility timeout: an unacknowledged message comes back when its consumer's channel
  closes (a worker killed, a connection lost), at once. What bounds a step instead is
  RabbitMQ's ``consumer_timeout`` (:data:`CONSUMER_TIMEOUT_MS`);
- results over AMQP to the caller that waits for them (``rpc://``) unless
  ``NOVAQ_RESULT_BACKEND`` names a backend: "amqp" is no Celery result backend, and the
  database's state machine is what novaq reads, never a stored result.
"""

from __future__ import annotations

from typing import Any

from novaq.redis_transport import transport_for
from novaq.settings_groups import CeleryGroup

#: The URL schemes of kombu's AMQP transports (``amqp`` is ``pyamqp``, the ``amqp`` library).
AMQP_SCHEMES = frozenset({"amqp", "amqps", "pyamqp"})

#: RabbitMQ's ``consumer_timeout`` that the project's scripts write (two hours; RabbitMQ's
#: default is 30 minutes). It must exceed the longest step plus its waits for the
#: database, the same bound as ``[celery] visibility_timeout`` on Redis (3600 s by
#: default): past it the broker closes the worker's channel and delivers the step's
#: message again while the step still runs.
CONSUMER_TIMEOUT_MS = 7_200_000

#: The result backend of a RabbitMQ broker when none is configured.
AMQP_RESULT_BACKEND = "rpc://"


def is_amqp(broker_url: str) -> bool:
    """Whether ``broker_url`` (the first of a ``;``-separated failover list) names RabbitMQ."""
    first = broker_url.split(";", 1)[0].strip()
    scheme, sep, _ = first.partition("://")
    return bool(sep) and scheme.partition("+")[0].lower() in AMQP_SCHEMES


def broker_options(
    broker_url: str, result_backend: str | None, celery: CeleryGroup
) -> dict[str, Any]:
    """Celery's settings (lower-case names) for ``broker_url``; ``result_backend`` is the
    configured one, None when there is none."""
    if is_amqp(broker_url):
        return rabbitmq_options(result_backend)
    return redis_options(broker_url, result_backend, celery)


def redis_options(
    broker_url: str, result_backend: str | None, celery: CeleryGroup
) -> dict[str, Any]:
    visibility_timeout = celery.visibility_timeout
    return {
        "result_backend": result_backend or broker_url,
        # kombu's Redis transport, with which a worker survives a lost broker connection
        # while a step is running (issue 14); None for another broker: kombu's own.
        "broker_transport": transport_for(broker_url),
        "visibility_timeout": visibility_timeout,
        "broker_transport_options": {
            "visibility_timeout": visibility_timeout,
            # How often unacked messages of dead workers are looked for (kombu 5.7 options).
            "unacked_restore_interval": celery.unacked_restore_interval,
            "unacked_restore_throttle": 1,
        },
        "result_backend_transport_options": {
            "visibility_timeout": visibility_timeout,
            # A step's result is stored after its work is committed: retried for about a
            # minute (a broker restart) rather than the backend's 20 s, after which Celery
            # would count the finished step as failed and call its errback.
            "retry_policy": {
                "max_retries": 60,
                "interval_start": 0,
                "interval_step": 1,
                "interval_max": 1,
            },
        },
    }


def beat_entry_options(broker_url: str) -> dict[str, Any]:
    """What every beat entry's message carries beyond its ``expires``.

    NOTE: on RabbitMQ with ``rpc://`` results, a task's states (STARTED, SUCCESS) are sent
    to its publisher's reply queue, and beat, which publishes but never reads, declares
    one that nothing consumes: two messages per periodic run kept for ``result_expires``
    (measured: 18 after a minute of ``novaq up``). Nobody reads a periodic task's result
    (its run is recorded in the database), so none is sent."""
    if is_amqp(broker_url):
        return {"ignore_result": True}
    return {}


def rabbitmq_options(result_backend: str | None) -> dict[str, Any]:
    return {
        "result_backend": result_backend or AMQP_RESULT_BACKEND,
        "broker_transport": None,
        "broker_transport_options": {"confirm_publish": True},
        "result_backend_transport_options": {},
        "task_default_queue_type": "quorum",
        "task_create_missing_queue_type": "quorum",
        "worker_detect_quorum_queues": True,
    }


__all__ = [
    "AMQP_RESULT_BACKEND",
    "AMQP_SCHEMES",
    "CONSUMER_TIMEOUT_MS",
    "beat_entry_options",
    "broker_options",
    "is_amqp",
    "rabbitmq_options",
    "redis_options",
]
