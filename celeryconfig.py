"""Celery settings, derived from novaq's settings (``novaq.settings``).

JSON only; late acks with reject-on-worker-lost because every step is idempotent; one
message reserved per process; the visibility timeout set in all three places Celery reads
it on Redis; quorum queues and publisher confirms on RabbitMQ (``novaq.broker_options``);
per-step routing by a router function; running steps are never cancelled when the broker
connection drops; kombu's Redis transport with novaq's workaround for a lost connection
(``novaq.redis_transport``). Each setting and its reason: docs/reliability.md.
"""

from __future__ import annotations

from compute.periodic.schedule import beat_schedule_for
from novaq.broker_options import beat_entry_options, broker_options
from novaq.settings import find_local_cluster, get_settings, required_broker_url

_settings = get_settings()
if not _settings.broker_url and find_local_cluster():
    # A `novaq up` started since this process first read its settings (Celery imports this
    # module again after it raised): read them again, now pointed at that cluster.
    get_settings.cache_clear()
    _settings = get_settings()

# The configured broker or the local cluster's (novaq.settings.find_local_cluster); with
# neither, ServiceUnavailable at the first use of the app, never a default broker.
broker_url = required_broker_url(_settings)
# What depends on the broker (novaq.broker_options): on Redis, the result backend, novaq's
# Redis transport and the visibility timeout in the three places Celery reads it; on
# RabbitMQ, quorum queues, publisher confirms and an rpc:// result backend.
globals().update(broker_options(broker_url, _settings.result_backend, _settings.celery))

task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
result_accept_content = ["json"]

task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
worker_deduplicate_successful_tasks = True
# NOTE: off on purpose. On a lost connection a running step keeps running: it finishes
# its operation, and its ack reaches Redis once the worker is back (or, later than the
# visibility timeout, its message returns and the step's begin sees it done). On, a
# prefork worker kills the step half-way and acks it: the workflow is lost (issue 14).
worker_cancel_long_running_tasks_on_connection_loss = False
broker_connection_retry_on_startup = True
# A worker never gives up on its broker (the default gives up after 100 attempts).
broker_connection_max_retries = None
# The API's policy: fail fast (ServiceUnavailable). Workers retry for about a minute
# (tasks/celery.py, WORKER_PUBLISH_RETRY_POLICY).
task_publish_retry_policy = {"max_retries": 2, "interval_start": 0, "interval_step": 0.2}

task_routes = ("tasks.routing.route_task",)
task_default_queue = "scheduler"
task_create_missing_queues = True

worker_send_task_events = True
task_send_sent_event = True
task_track_started = True
result_extended = True
result_expires = 86400

timezone = "UTC"
enable_utc = True


# Beat: one entry per periodic task (compute/periodic/schedule.py), named as Nova names the task.
beat_scheduler = "tasks.beat:NovaqScheduler"
beat_schedule_filename = str((_settings.state_dir / "celerybeat-schedule").resolve())
beat_max_loop_interval = 5
beat_schedule = beat_schedule_for(_settings)
# On RabbitMQ, beat's messages ask for no result (novaq.broker_options.beat_entry_options).
for _entry in beat_schedule.values():
    _entry["options"] = {**dict(_entry["options"]), **beat_entry_options(broker_url)}  # type: ignore[call-overload]
