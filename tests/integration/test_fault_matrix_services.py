"""The fault matrix, continued: the broker and the database fail in the middle of every
step of build, delete, migrate (prep, resize, finish), confirm, revert and stop.

A cluster of its own (a scheduler and two compute hosts, ``fx1`` and ``fx2``, in a zone of
their own so no other test's scheduler places anything there) on a ``redis-server`` of its
own and reaching PostgreSQL through a TCP proxy, so the test can SIGKILL the one and cut
the other without touching the shared services. For each step, paused at an exact point
(``novaq.fault_points``):

- **broker**: the redis-server is SIGKILLed and restarted on its data (AOF, fsync always),
  then the step goes on;
- **database**: the proxy refuses new connections and cuts the open ones for 10 s while
  the step goes on (it waits the outage out: ``[database] outage_tolerance_s``).

After each, the operation has ended where Nova ends it (done, or undone with a fault),
nothing is in flight (the reaper of operations in flight is run by the test every second,
as beat would), and the audit finds no leak.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import delete, select

from models import Aggregate, Allocation, ComputeNode, Service
from models.db import session_scope
from novaq import fault_points
from novaq.exceptions import FlavorExists
from tests.integration.checks import assert_no_leaks
from tests.integration.fault_matrix import Case, make_cases, reap_until_settled
from tests.integration.private_redis import PrivateRedis, publishing_through
from tests.integration.workers import Cluster, start_cluster
from tests.tcp_proxy import TcpProxy
from workflows import api

pytestmark = pytest.mark.integration

HOSTS = ("fx1", "fx2")
ZONE, AGGREGATE, FLAVOR = "fx", "fx-aggregate", "fx.small"
OUTAGE_S = 10.0


@dataclass
class Site:
    broker: PrivateRedis
    proxy: TcpProxy
    cluster: Cluster
    faults: Path


@pytest.fixture(scope="module")
def site(services: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("fault-matrix-services")
    faults = root / "faults"
    faults.mkdir()
    broker = PrivateRedis(root / "redis").start()
    proxy = TcpProxy(5432).start()
    through_proxy = services.replace(":5432/", f":{proxy.port}/")
    env = {
        "NOVAQ_BROKER_URL": broker.url(),
        "NOVAQ_DATABASE_URL": through_proxy,
        fault_points.ENV: str(faults),
        # A step here waits for its fault, then for the database, longer than the tier's
        # 15 s: the visibility timeout must exceed a step plus its outage waits, or Redis
        # hands the step out a second time while it still runs (docs/reliability.md).
        "NOVAQ_CELERY__VISIBILITY_TIMEOUT": "120",
    }
    try:
        with publishing_through(broker.url()):
            cluster = start_cluster(root, list(HOSTS), env=env, scheduler_node="scheduler@fx")
            try:
                with contextlib.suppress(FlavorExists):
                    api.create_flavor(FLAVOR, 1, 512, 1)
                aggregate = api.create_aggregate(AGGREGATE, availability_zone=ZONE)
                for host in HOSTS:
                    api.add_host_to_aggregate(aggregate["id"], host)
                yield Site(broker, proxy, cluster, faults)
            finally:
                cluster.stop()
    finally:
        proxy.close()
        broker.stop()
        _forget_hosts(services)


def _forget_hosts(db_url: str) -> None:
    """Later tests of the session never pick a host whose worker is gone."""
    with session_scope(db_url) as session:
        for aggregate in session.scalars(select(Aggregate).where(Aggregate.name == AGGREGATE)):
            session.delete(aggregate)
        nodes = select(ComputeNode.id).where(ComputeNode.host.in_(HOSTS))
        session.execute(delete(Allocation).where(Allocation.compute_node_id.in_(nodes)))
        session.execute(delete(Service).where(Service.host.in_(HOSTS)))
        session.execute(delete(ComputeNode).where(ComputeNode.host.in_(HOSTS)))


CASES = [c for c in make_cases(ZONE, *HOSTS, flavor=FLAVOR) if c.name != "migrate"]


def _restart_broker(site: Site, point: str) -> None:
    """SIGKILL the broker and start it again on its data while the step waits."""
    site.broker.kill()
    site.broker.start()
    site.cluster.wait_ready({f"compute@{h}" for h in HOSTS}, timeout_s=60)
    fault_points.release(site.faults, point)


def _database_outage(site: Site, point: str) -> None:
    """The database away for ``OUTAGE_S`` while the step goes on."""
    site.proxy.refuse()
    fault_points.release(site.faults, point)
    time.sleep(OUTAGE_S)
    site.proxy.restore()


FAULTS = {"broker": _restart_broker, "database": _database_outage}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_service_fails_mid_step(case: Case, fault: str, site: Site) -> None:
    uuid = case.prepare()
    fault_points.arm_pause(site.faults, case.point)
    try:
        uuid = case.request(uuid)
        fault_points.wait_reached(site.faults, case.point, timeout_s=60)
        FAULTS[fault](site, case.point)
    finally:
        fault_points.release(site.faults, case.point)
        site.proxy.restore()
    view, reaped = reap_until_settled(uuid, case.ends)
    status, task_fault = view["status"], (view.get("fault") or {}).get("message")
    print(f"{case.name} / {fault}: {status} fault={task_fault} reaper={sorted(reaped)}")
    if status != case.ends[0]:
        assert task_fault, view  # undone: with a fault that says why
    assert_no_leaks(HOSTS)
    with contextlib.suppress(Exception):
        if api.show(uuid)["status"] != "DELETED":
            api.delete(uuid)
            api.wait(uuid, "DELETED", timeout=60)
    assert_no_leaks(HOSTS)
    for worker in (site.cluster.workers[h] for h in HOSTS):
        assert worker.alive(), worker.tail()
        assert "Unrecoverable error" not in worker.log.read_text(errors="replace")


FULL_CASES = [c for c in make_cases(ZONE, *HOSTS, flavor=FLAVOR) if c.name in ("build", "stop")]


@pytest.mark.parametrize("case", FULL_CASES, ids=[c.name for c in FULL_CASES])
def test_a_full_broker_refuses_the_publish_and_nothing_is_written(case: Case, site: Site) -> None:
    """Redis out of memory (``maxmemory`` reached, ``noeviction``) refuses the publish: the
    caller gets ``ServiceUnavailable`` and the request's write is taken back; once the
    broker has room again, the same request goes through."""
    from novaq.exceptions import ServiceUnavailable

    uuid = case.prepare()
    before = api.show(uuid) if uuid else None
    servers = {s["uuid"] for s in api.list_instances()}
    client = site.broker.client()
    client.config_set("maxmemory", "1")  # full: every write is refused (OOM)
    try:
        with pytest.raises(ServiceUnavailable):
            case.request(uuid)
    finally:
        client.config_set("maxmemory", "0")
    if uuid is None:
        assert {s["uuid"] for s in api.list_instances()} == servers
    else:
        after = api.show(uuid)
        assert before is not None
        assert (after["status"], after["task_state"]) == (before["status"], before["task_state"])
    uuid = case.request(uuid)
    api.wait(uuid, case.ends[0], timeout=60)
    assert_no_leaks(HOSTS)
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=60)
