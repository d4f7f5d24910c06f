"""The Celery settings derived from the broker URL (``novaq.broker_options``): quorum
queues, publisher confirms and an ``rpc://`` result backend on RabbitMQ; the visibility
timeout in its three places and novaq's Redis transport on Redis. The RabbitMQ runs of the
integration tier (``tests/integration/brokers.py``) check them on a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from novaq.broker_options import (
    AMQP_RESULT_BACKEND,
    CONSUMER_TIMEOUT_MS,
    broker_options,
    is_amqp,
)
from novaq.settings_groups import CeleryGroup

ROOT = Path(__file__).resolve().parents[2]
CELERY = CeleryGroup(visibility_timeout=900, unacked_restore_interval=7)
RABBIT = "amqp://guest:guest@127.0.0.1:5672/novaq"


@pytest.mark.parametrize(
    "url",
    [RABBIT, "amqps://u:p@mq.example:5671//", "pyamqp://127.0.0.1//", "amqp://a//;amqp://b//"],
)
def test_amqp_urls_are_rabbitmq(url: str) -> None:
    assert is_amqp(url)


@pytest.mark.parametrize(
    "url", ["redis://127.0.0.1:6379/0", "rediss://h:6380/1", "memory://", "amqp", ""]
)
def test_other_urls_are_not_rabbitmq(url: str) -> None:
    assert not is_amqp(url)


def test_rabbitmq_gets_quorum_queues_publisher_confirms_and_rpc_results() -> None:
    options = broker_options(RABBIT, None, CELERY)
    assert options["task_default_queue_type"] == "quorum"
    assert options["task_create_missing_queue_type"] == "quorum"
    assert options["worker_detect_quorum_queues"] is True
    assert options["broker_transport_options"] == {"confirm_publish": True}
    assert options["result_backend"] == AMQP_RESULT_BACKEND == "rpc://"
    assert options["broker_transport"] is None  # kombu's own AMQP transport


def test_rabbitmq_has_no_visibility_timeout() -> None:
    options = broker_options(RABBIT, None, CELERY)
    assert "visibility_timeout" not in options
    assert "visibility_timeout" not in options["broker_transport_options"]
    assert options["result_backend_transport_options"] == {}


def test_a_configured_result_backend_is_kept_on_rabbitmq() -> None:
    backend = "redis://127.0.0.1:6379/3"
    assert broker_options(RABBIT, backend, CELERY)["result_backend"] == backend


def test_redis_gets_the_visibility_timeout_in_its_three_places_and_novaqs_transport() -> None:
    url = "redis://127.0.0.1:6379/2"
    options = broker_options(url, None, CELERY)
    assert options["visibility_timeout"] == 900
    assert options["broker_transport_options"]["visibility_timeout"] == 900
    assert options["result_backend_transport_options"]["visibility_timeout"] == 900
    assert options["broker_transport_options"]["unacked_restore_interval"] == 7
    assert options["broker_transport"] == "novaq.redis_transport:Transport"
    assert options["result_backend"] == url
    assert "task_default_queue_type" not in options  # Celery's classic default


def test_another_transport_keeps_kombus_own() -> None:
    options = broker_options("memory://", "cache+memory://", CELERY)
    assert options["broker_transport"] is None
    assert options["result_backend"] == "cache+memory://"


def test_the_consumer_timeout_the_scripts_write_exceeds_the_default_step_bound() -> None:
    # scripts/rabbitmq-up writes this value; the step bound is [celery] visibility_timeout.
    assert CeleryGroup().visibility_timeout * 1000 < CONSUMER_TIMEOUT_MS
    script = (ROOT / "scripts" / "rabbitmq-up").read_text()
    assert f"consumer_timeout = {CONSUMER_TIMEOUT_MS}\n" in script


def _celery_conf(broker_url: str) -> dict[str, Any]:
    """What a fresh process's Celery app (``celeryconfig``) makes of ``broker_url``:
    a few settings, and the queue arguments of the scheduler queue and of a host's
    queue created on first use (Celery's own queue code; no broker is contacted)."""
    code = (
        "import json\n"
        "from novaq.celery_app import app\n"
        "c = app.conf\n"
        "queues = app.amqp.queues\n"
        "print(json.dumps({'result_backend': c.result_backend,\n"
        "    'transport': c.broker_transport,\n"
        "    'options': c.broker_transport_options,\n"
        "    'scheduler': queues['scheduler'].queue_arguments,\n"
        "    'host': queues['compute.h1'].queue_arguments,\n"
        "    'beat': [e['options'] for e in c.beat_schedule.values()]}))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NOVAQ_RESULT_BACKEND"}
    # (the unit tier turns periodic tasks off: beat's schedule would be empty)
    env.update(NOVAQ_BROKER_URL=broker_url, NOVAQ_PERIODIC_ENABLE="true", PYTHONPATH=str(ROOT))
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_celeryconfig_declares_every_queue_quorum_on_rabbitmq() -> None:
    conf = _celery_conf(RABBIT)
    assert conf["scheduler"] == {"x-queue-type": "quorum"}
    assert conf["host"] == {"x-queue-type": "quorum"}  # a compute.<host> queue made on demand
    assert conf["options"] == {"confirm_publish": True}
    assert (conf["result_backend"], conf["transport"]) == ("rpc://", None)
    # Beat reads no result: none is sent to its reply queue, which nothing consumes.
    assert conf["beat"] and all(o["ignore_result"] is True for o in conf["beat"])
    assert all(o["expires"] > 0 for o in conf["beat"])


def test_celeryconfig_keeps_classic_queues_on_redis() -> None:
    conf = _celery_conf("redis://127.0.0.1:6379/9")
    assert conf["scheduler"] is None and conf["host"] is None
    assert conf["transport"] == "novaq.redis_transport:Transport"
    assert conf["options"]["visibility_timeout"] == 3600
    assert conf["beat"] and all("ignore_result" not in o for o in conf["beat"])
