"""celery beat driving the periodic tasks on a real cluster: a real ``celery beat``, a
real broker (Redis, and RabbitMQ), a scheduler and two compute workers, every spacing
shrunk to 1-2 s.

- every per-host task reaches both hosts, every cluster task runs (records in the DB);
- a second beat refuses to start;
- a stopped host goes down after service_down_time, then gets no new periodic messages;
  the messages queued for it meanwhile expire: on Redis they wait in its queue and are
  discarded as expired when it comes back; on RabbitMQ the broker drops them itself once
  their time to live (the message's ``expires``) has passed, while the host is still down.
"""

from __future__ import annotations

import re
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select

from compute.periodic import runs
from compute.periodic.schedule import CLUSTER, PERIODIC_TASKS
from compute.sessions import sessions_for
from models import ComputeNode, HostMapping, PeriodicTaskRun, Service
from models.db import session_scope
from tests.integration.brokers import REDIS, Broker, on_both_brokers
from tests.integration.workers import ROOT, Cluster, Worker
from workflows import api

pytestmark = pytest.mark.integration

HOSTS = ("pa", "pb")
FAST = {
    "NOVAQ_PERIODIC__DEFAULT_SPACING": "1",
    "NOVAQ_SYNC_POWER_STATE_INTERVAL": "2",
    "NOVAQ_SCHEDULER_INSTANCE_SYNC_INTERVAL": "2",
    "NOVAQ_HEAL_INSTANCE_INFO_CACHE_INTERVAL": "2",
    "NOVAQ_SHELVED_POLL_INTERVAL": "2",
    "NOVAQ_VOLUME_USAGE_POLL_INTERVAL": "2",
    "NOVAQ_UPDATE_RESOURCES_INTERVAL": "2",
    "NOVAQ_RUNNING_DELETED_INSTANCE_POLL_INTERVAL": "2",
    "NOVAQ_IMAGE_CACHE__MANAGER_INTERVAL": "2",
    "NOVAQ_INSTANCE_DELETE_INTERVAL": "2",
    "NOVAQ_SCHEDULER__DISCOVER_HOSTS_IN_CELLS_INTERVAL": "2",
    # Thresholds opened (long enough that nothing here is due): every task does a pass.
    "NOVAQ_INSTANCE_BUILD_TIMEOUT": "3600",
    "NOVAQ_REBOOT_TIMEOUT": "3600",
    "NOVAQ_RESCUE_TIMEOUT": "3600",
    "NOVAQ_RESIZE_CONFIRM_WINDOW": "3600",
    "NOVAQ_SHELVED_OFFLOAD_TIME": "3600",
    "NOVAQ_RECLAIM_INSTANCE_INTERVAL": "3600",
    "NOVAQ_INSTANCE_USAGE_AUDIT": "true",
}


def _beat(cluster: Cluster, name: str) -> Worker:
    import os

    argv = [sys.executable, "-m", "celery", "-A", "tasks", "beat", "-l", "INFO"]
    argv += ["--schedule", str(cluster.state_dir / f"{name}-schedule")]
    env = dict(os.environ, PYTHONPATH=str(ROOT), **FAST)
    worker = Worker(name, argv, env, cluster.state_dir / f"{name}.log").start()
    cluster.workers[name] = worker
    return worker


def _compute(cluster: Cluster, host: str) -> Worker:
    return cluster.add(host, f"compute.{host}", f"compute@{host}", host, extra_env=FAST)


@pytest.fixture
def beat_cluster(broker: Broker, tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path)
    cluster.add(
        "scheduler", "scheduler,maintenance", "scheduler@beat", "beat-sched", extra_env=FAST
    )
    for host in HOSTS:
        _compute(cluster, host)
    cluster.wait_ready({"scheduler@beat", *(f"compute@{h}" for h in HOSTS)})
    _beat(cluster, "beat")
    yield cluster
    cluster.stop()
    with session_scope(broker.db_url) as session:  # later tests never see these hosts
        for model in (Service, ComputeNode, HostMapping):
            session.execute(delete(model).where(model.host.in_([*HOSTS, "beat-sched"])))
        session.execute(delete(PeriodicTaskRun))


def _until(check: Callable[[], Any], timeout_s: float, what: str, cluster: Cluster) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.5)
    logs = "\n".join(f"--- {w.name}\n{w.tail()}" for w in cluster.workers.values())
    pytest.fail(f"timed out waiting for {what}\n{logs}")


def _run_counts(services: str) -> dict[tuple[str, str], int]:
    return {key: r["run_count"] for key, r in runs.last_runs(sessions_for(services)).items()}


def _state(host: str) -> str:
    return next(s["state"] for s in api.list_services() if s["host"] == host)


@on_both_brokers
def test_beat_runs_every_periodic_task_on_every_up_host_and_skips_a_down_one(
    broker: Broker, beat_cluster: Cluster
) -> None:
    services = broker.db_url
    expected = {(t.name, h) for t in PERIODIC_TASKS if t.per_host for h in HOSTS} | {
        (t.name, CLUSTER) for t in PERIODIC_TASKS if t.scope == CLUSTER
    }

    def all_ran() -> bool:
        done = runs.last_runs(sessions_for(services))
        return all(key in done and done[key]["run_count"] >= 1 for key in expected)

    _until(all_ran, 45, "every periodic task on both hosts", beat_cluster)
    records = runs.last_runs(sessions_for(services))
    failed = {k: r["last_error"] for k, r in records.items() if r["last_status"] == "error"}
    assert failed == {}
    skipped = {k for k in expected if records[k]["last_status"] == "skipped"}
    assert skipped == set(), "a gate stayed closed although its option is set"
    # discover_hosts mapped both compute hosts (run_immediately, then every 2 s).
    with session_scope(services) as session:
        mapped = set(session.scalars(select(HostMapping.host)))
    assert set(HOSTS) <= mapped

    # A second beat refuses to start: two would publish every tick twice.
    second = _beat(beat_cluster, "beat2")
    # (generous: under load its exit alone was seen to take more than 30 s)
    assert second.proc is not None and second.proc.wait(120) != 0
    assert "holds the beat lease" in second.tail()
    beat_cluster.workers.pop("beat2")

    # Stop pb: after service_down_time it is down and gets no new periodic messages.
    beat_cluster.workers["pb"].stop(signal.SIGKILL)
    length = broker.queue_length
    _until(lambda: length("compute.pb") > 0, 20, "a tick queued for the dead pb", beat_cluster)
    _until(lambda: _state("pb") == "down", 20, "pb down", beat_cluster)
    time.sleep(2.5)  # a fan-out that looked just before pb went down has published by now
    if broker.name != REDIS:
        # RabbitMQ drops each tick once its time to live (its expires) has passed.
        _until(
            lambda: length("compute.pb") == 0, 20, "the broker expiring pb's ticks", beat_cluster
        )
    queued = length("compute.pb")
    before = _run_counts(services)
    time.sleep(4)
    assert length("compute.pb") == queued, "a down host still receives periodic tasks"
    after = _run_counts(services)
    assert all(after[(t, h)] == before[(t, h)] for (t, h) in before if h == "pb")
    assert any(after[(t, h)] > before[(t, h)] for (t, h) in before if h == "pa")

    # pb comes back: whatever is still queued for it is discarded as expired, and it runs
    # its periodic tasks again. (Not "its queue empty": new ticks keep coming once it is
    # up, faster than a loaded machine's worker may take them.)
    log = beat_cluster.state_dir / "pb.log"
    offset = log.stat().st_size

    def discarded() -> int:
        restarted = log.read_bytes()[offset:].decode(errors="replace")
        return len(re.findall(r"Discarding revoked task: compute\.\w+", restarted))

    _compute(beat_cluster, "pb")
    beat_cluster.wait_ready({"compute@pb"})
    _until(lambda: discarded() >= queued, 60, "pb discarding its stale ticks", beat_cluster)
    _until(
        lambda: any(v > before[k] for k, v in _run_counts(services).items() if k[1] == "pb"),
        60,
        "pb running its periodic tasks again",
        beat_cluster,
    )
