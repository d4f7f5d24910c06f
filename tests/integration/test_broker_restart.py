"""The broker dies while a step runs (issue 14, items 1 and 2).

A cluster of its own (a scheduler and one compute host, ``bhost``) on a ``redis-server`` of
its own (``private_redis``). A step is paused at an exact point (``novaq.fault_points``),
the broker is SIGKILLed and restarted, on its data (AOF, fsync always) or empty, the
worker reconnects, the step is released; then the compute worker is still running (kombu's
``restore_unacked`` used to kill it: ``novaq.redis_transport``), the operation ends where
Nova ends it, the rest of its chain ran, nothing is stuck in the database or the broker,
and the audit finds no leak.

On its data, the running step's message is still in Redis's unacked index after the
restart; the step's late ack, sent once the worker is back (well within the visibility
timeout here), removes it, so it is not delivered again. Empty, the message is gone with
the broker's data; the step does not need it: it completes, and its result and its
chain's next message are published to the new broker.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from models import Aggregate, Allocation, ComputeNode, Service, TaskDelivery
from models.db import session_scope
from novaq import fault_points
from tests.integration.checks import assert_no_leaks, flavor
from tests.integration.private_redis import PrivateRedis, publishing_through
from tests.integration.workers import Cluster, Worker, start_cluster
from virt import power_state
from workflows import api

pytestmark = pytest.mark.integration

HOST = "bhost"
NODE = f"compute@{HOST}"
SMALL, MEDIUM = "brk.small", "brk.medium"
#: bhost's availability zone of its own: the scheduler never picks another session's host
#: (up in the shared database, its queue on the other broker), for a build or a resize.
ZONE, AGGREGATE = "brk", "brk-aggregate"


@dataclass
class BrokerCluster:
    db_url: str
    broker: PrivateRedis
    cluster: Cluster
    faults: Path

    @property
    def compute(self) -> Worker:
        return self.cluster.workers[HOST]

    def restart_broker(self, *, keep_data: bool) -> None:
        """SIGKILL the broker, then start it again on the same port, on its data or empty,
        and wait until the compute worker answers through it again."""
        self.broker.kill()
        if not keep_data:
            self.broker.wipe()
        self.broker.start()
        self.cluster.wait_ready({NODE}, timeout_s=30)

    def unacked(self, task: str) -> list[str]:
        """The ids of ``task``'s messages Redis holds as delivered and not acked (kombu's
        ``unacked`` hash: ``[message, exchange, routing key]`` in JSON)."""
        headers = [json.loads(v)[0]["headers"] for v in self.broker.client().hvals("unacked")]
        return [h["id"] for h in headers if h["task"] == task]

    def result_state(self, task_id: str) -> str:
        """The task's state in the result backend (this broker)."""
        from novaq.celery_app import app

        return str(app.AsyncResult(task_id).state)

    def deliveries(self) -> set[tuple[str, str]]:
        """The steps in flight, as the delivery counter sees them."""
        with session_scope(self.db_url) as session:
            return {(d.task_id, d.task_name) for d in session.scalars(select(TaskDelivery))}

    def assert_settled(self, deliveries_before: set[tuple[str, str]]) -> None:
        """Nothing stuck: no step in flight nor message waiting on the broker, the
        compute worker alive and never fatally hit."""
        deadline = time.monotonic() + 20
        client = self.broker.client()
        while client.hlen("unacked") or client.llen(f"compute.{HOST}"):
            assert time.monotonic() < deadline, (
                client.hgetall("unacked"),
                client.lrange(f"compute.{HOST}", 0, -1),
            )
            time.sleep(0.2)
        assert self.deliveries() <= deliveries_before
        assert self.compute.alive(), self.compute.tail()
        assert "Unrecoverable error" not in self.compute.log.read_text(errors="replace")
        assert_no_leaks([HOST])


@pytest.fixture(scope="module")
def brokered(services: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    root = tmp_path_factory.mktemp("broker-restart")
    faults = root / "faults"
    faults.mkdir()
    config = root / f"{HOST}.toml"
    config.write_text(f'[[hosts]]\nname = "{HOST}"\nmemory_mb = 16384\n')
    broker = PrivateRedis(root / "redis").start()
    env = {"NOVAQ_BROKER_URL": broker.url(), fault_points.ENV: str(faults)}
    try:
        with publishing_through(broker.url()):
            cluster = start_cluster(
                root, [HOST], extra_env={HOST: {"NOVAQ_CONFIG": str(config)}}, env=env
            )
            try:
                flavor(SMALL, 1, 512)
                flavor(MEDIUM, 2, 1024)
                aggregate = api.create_aggregate(AGGREGATE, availability_zone=ZONE)
                api.add_host_to_aggregate(aggregate["id"], HOST)
                yield BrokerCluster(services, broker, cluster, faults)
            finally:
                cluster.stop()
    finally:
        broker.stop()
        _forget_host(services)


def _forget_host(db_url: str) -> None:
    """So later tests of the session never pick a host whose worker is gone, nor see its
    zone."""
    with session_scope(db_url) as session:
        for aggregate in session.scalars(select(Aggregate).where(Aggregate.name == AGGREGATE)):
            session.delete(aggregate)
        nodes = select(ComputeNode.id).where(ComputeNode.host == HOST)
        session.execute(delete(Allocation).where(Allocation.compute_node_id.in_(nodes)))
        session.execute(delete(Service).where(Service.host == HOST))
        session.execute(delete(ComputeNode).where(ComputeNode.host == HOST))


def _boot_active(name: str) -> str:
    [uuid] = api.boot(name, SMALL, "cirros", availability_zone=ZONE)
    api.wait(uuid, "ACTIVE", timeout=30)
    return uuid


def _restart_broker_during(
    brokered: BrokerCluster,
    point: str,
    task: str,
    start: Callable[[], object],
    *,
    keep_data: bool,
) -> str:
    """Start an operation, hold its step (``task``) at ``point``, restart the broker:
    the step's message is still unacked in Redis if the broker kept its data, gone if
    not (and the worker did not give it back); release the step. Returns its task id."""
    fault_points.arm_pause(brokered.faults, point)
    start()
    fault_points.wait_reached(brokered.faults, point, timeout_s=30)
    [task_id] = brokered.unacked(task)
    brokered.restart_broker(keep_data=keep_data)
    assert brokered.unacked(task) == ([task_id] if keep_data else [])
    (brokered.faults / f"{point}.pause").unlink()
    return task_id


def _delete(uuid: str) -> None:
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


@pytest.mark.parametrize("keep_data", [True, False], ids=["on-its-data", "empty"])
def test_a_build_running_when_the_broker_restarts_ends_active(
    brokered: BrokerCluster, keep_data: bool
) -> None:
    before = brokered.deliveries()
    booted: list[str] = []

    def boot() -> None:
        booted.extend(api.boot("brk-build", SMALL, "cirros", availability_zone=ZONE))

    build = "compute.build_and_run_instance"
    step = _restart_broker_during(brokered, "build:act", build, boot, keep_data=keep_data)
    view = api.wait(booted[0], "ACTIVE", timeout=30)
    assert (view["host"], view["power_state"]) == (HOST, power_state.RUNNING)
    brokered.assert_settled(before)
    assert brokered.result_state(step) == "SUCCESS"  # stored after the restart
    _delete(booted[0])


def test_a_stop_running_when_the_broker_restarts_on_its_data_ends_shutoff(
    brokered: BrokerCluster,
) -> None:
    uuid = _boot_active("brk-stop")
    before = brokered.deliveries()
    stop = "compute.stop_instance"
    step = _restart_broker_during(
        brokered, "stop:act", stop, lambda: api.stop(uuid), keep_data=True
    )
    view = api.wait(uuid, "SHUTOFF", timeout=30)
    assert view["power_state"] == power_state.SHUTDOWN  # as the driver read it back
    brokered.assert_settled(before)
    assert brokered.result_state(step) == "SUCCESS"
    _delete(uuid)


@pytest.mark.parametrize("keep_data", [True, False], ids=["on-its-data", "empty"])
def test_a_resize_mid_chain_when_the_broker_restarts_still_runs_the_rest_of_its_chain(
    brokered: BrokerCluster, keep_data: bool
) -> None:
    """prep_resize → resize_instance (held here) → finish_resize: the next step is
    published after the broker came back, and runs."""
    uuid = _boot_active("brk-resize")
    before = brokered.deliveries()
    step = _restart_broker_during(
        brokered,
        "resize_instance:act",
        "compute.resize_instance",
        lambda: api.resize(uuid, MEDIUM),
        keep_data=keep_data,
    )
    view = api.wait(uuid, "VERIFY_RESIZE", timeout=30)
    assert view["flavor"]["name"] == MEDIUM
    [migration] = api.list_migrations(instance_uuid=uuid)
    assert migration["status"] == "finished"
    brokered.assert_settled(before)
    assert brokered.result_state(step) == "SUCCESS"
    api.confirm_resize(uuid)
    api.wait(uuid, "ACTIVE", timeout=30)
    _delete(uuid)
    assert_no_leaks([HOST])


def test_a_step_ending_while_the_broker_is_down_publishes_its_chain_once_it_is_back(
    brokered: BrokerCluster,
) -> None:
    """resize_instance ends during the outage: its chain's next step (finish_resize) is
    refused by the dead broker, retried (a worker's publish policy, ``tasks.celery``),
    and sent when the broker is back; the step's ack follows."""
    uuid = _boot_active("brk-outage")
    before = brokered.deliveries()
    point = "resize_instance:act"
    fault_points.arm_pause(brokered.faults, point)
    api.resize(uuid, MEDIUM)
    fault_points.wait_reached(brokered.faults, point, timeout_s=30)
    brokered.broker.kill()
    (brokered.faults / f"{point}.pause").unlink()
    _wait_for("the step's work done", lambda: api.show(uuid)["task_state"] == "resize_migrated")
    # Still refused at the 4th try: past the 2 retries of the API's policy (the broker
    # has been down ~1.5 s since the step ended).
    refused = "Retrying refused callback publish for 'compute.finish_resize' (4/"
    _wait_for(refused, lambda: refused in brokered.compute.log.read_text(errors="replace"))
    brokered.broker.start()
    view = api.wait(uuid, "VERIFY_RESIZE", timeout=30)
    assert view["flavor"]["name"] == MEDIUM
    brokered.cluster.wait_ready({NODE}, timeout_s=30)
    brokered.assert_settled(before)
    api.confirm_resize(uuid)
    api.wait(uuid, "ACTIVE", timeout=30)
    _delete(uuid)


def _wait_for(what: str, condition: Callable[[], bool], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"never seen: {what}"
        time.sleep(0.1)
