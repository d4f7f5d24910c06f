"""Failures on real workers: a host whose hypervisor refuses to start guests, a host
that stops reporting, a worker SIGKILLed mid-step (on Redis and on RabbitMQ: the step's
message comes back after the visibility timeout on Redis, at once on RabbitMQ)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select

from models import Allocation, ComputeNode, Service
from models.db import session_scope
from novaq.exceptions import FlavorExists
from tests.integration.brokers import Deployment, on_both_brokers
from tests.integration.conftest import Cluster, Worker
from workflows import api

pytestmark = pytest.mark.integration


@pytest.fixture
def broken_host(services: str, two_hosts: Cluster, tmp_path: Path) -> Iterator[Worker]:
    """A third compute host with far more RAM than the others (so the RAM weigher picks it)
    whose hypervisor refuses to start guests."""
    config = tmp_path / "broken.toml"
    config.write_text('[[hosts]]\nname = "broken"\nmemory_mb = 262144\nfail_spawn = true\n')
    worker = two_hosts.add(
        "broken",
        "compute.broken",
        "compute@broken",
        "broken",
        extra_env={"NOVAQ_CONFIG": str(config)},
    )
    two_hosts.wait_ready({"compute@broken"})
    yield worker
    worker.stop()
    two_hosts.workers.pop("broken", None)
    with session_scope(services) as session:  # forget the host so later tests never see it
        session.execute(delete(Service).where(Service.host == "broken"))
        session.execute(delete(ComputeNode).where(ComputeNode.host == "broken"))


def test_spawn_failure_on_a_forced_host_errors_with_fault_and_releases_then_the_host_goes_down(
    services: str, broken_host: Worker
) -> None:
    with contextlib.suppress(FlavorExists):
        api.create_flavor("it.fail", 1, 1024, 1)
    # "zone:host" forces the host, as Nova's boot does: no alternates, no reschedule.
    [uuid] = api.boot("doomed", "it.fail", "cirros", availability_zone="nova:broken")
    view = api.wait(uuid, "ERROR", timeout=60)
    assert view["fault"]["message"] == "Hypervisor error: simulated host refuses to start guests"
    assert view["host"] is None
    with session_scope(services) as session:
        held = session.scalar(
            select(func.count()).select_from(Allocation).where(Allocation.consumer_uuid == uuid)
        )
    assert held == 0
    broken = next(h for h in api.list_hosts() if h["host"] == "broken")
    assert (broken["vcpus_used"], broken["memory_mb_used"]) == (0, 512)
    [action] = api.list_actions(uuid)
    assert [(e["event"], e["result"]) for e in action["events"]] == [
        ("compute__do_build_and_run_instance", "Error")
    ]
    assert "HypervisorError" in action["events"][0]["traceback"]

    # The host stops heartbeating: it is down once service_down_time (6 s here) has passed.
    assert next(s for s in api.list_services() if s["host"] == "broken")["up"] is True
    broken_host.stop()
    deadline = time.monotonic() + 20
    while next(s for s in api.list_services() if s["host"] == "broken")["up"]:
        assert time.monotonic() < deadline, "the stopped host never went down"
        time.sleep(0.5)
    api.delete(uuid)
    assert api.show(uuid)["status"] == "DELETED"


def test_a_build_failing_on_its_host_lands_on_an_alternate_and_the_host_weighs_less(
    services: str, broken_host: Worker
) -> None:
    with contextlib.suppress(FlavorExists):
        api.create_flavor("it.fail", 1, 1024, 1)
    # The broken host has by far the most free RAM, so it is chosen first...
    [uuid] = api.boot("rescued", "it.fail", "cirros")
    view = api.wait(uuid, "ACTIVE", timeout=60)
    assert view["host"] in {"host1", "host2"}
    [action] = api.list_actions(uuid)
    assert [(e["event"], e["result"], e["host"]) for e in action["events"]] == [
        ("compute__do_build_and_run_instance", "Error", "broken"),
        ("compute__do_build_and_run_instance", "Success", view["host"]),
    ]
    assert view["fault"]["message"].startswith("Hypervisor error")  # the failed attempt
    with session_scope(services) as session:
        node = session.scalars(select(ComputeNode).where(ComputeNode.host == "broken")).one()
        assert node.stats["failed_builds"] == 1
        assert (
            session.scalar(
                select(func.count())
                .select_from(Allocation)
                .where(Allocation.compute_node_id == node.id)
            )
            == 0
        )
    # ... and after one failed build the BuildFailureWeigher keeps the next one away from it.
    [second] = api.boot("next", "it.fail", "cirros")
    assert api.wait(second, "ACTIVE", timeout=60)["host"] in {"host1", "host2"}
    assert [e["host"] for e in api.list_actions(second)[0]["events"]] == [api.show(second)["host"]]
    for server in (uuid, second):
        api.delete(server)
        api.wait(server, "DELETED", timeout=30)


@pytest.fixture
def slow_host(deployment: Deployment, tmp_path: Path) -> Iterator[Worker]:
    """A compute host whose guests take 5 s to start, and more RAM than the others."""
    config = tmp_path / "slow.toml"
    config.write_text('[[hosts]]\nname = "slow"\nmemory_mb = 262144\nspawn_delay_s = 5\n')
    env = {"NOVAQ_CONFIG": str(config)}
    cluster = deployment.cluster
    worker = cluster.add("slow", "compute.slow", "compute@slow", "slow", extra_env=env)
    cluster.wait_ready({"compute@slow"})
    yield worker
    worker.stop()
    cluster.workers.pop("slow", None)
    with session_scope(deployment.db_url) as session:
        session.execute(delete(Service).where(Service.host == "slow"))
        session.execute(
            delete(Allocation).where(
                Allocation.compute_node_id.in_(
                    select(ComputeNode.id).where(ComputeNode.host == "slow")
                )
            )
        )
        session.execute(delete(ComputeNode).where(ComputeNode.host == "slow"))


def test_a_worker_killed_mid_spawn_errors_the_build_at_restart_and_leaks_nothing(
    deployment: Deployment, slow_host: Worker
) -> None:
    import signal

    with contextlib.suppress(FlavorExists):
        api.create_flavor("it.slow", 1, 1024, 1)
    [uuid] = api.boot("interrupted", "it.slow", "cirros")
    deadline = time.monotonic() + 30
    while api.show(uuid)["task_state"] != "spawning":
        assert time.monotonic() < deadline, api.show(uuid)
        time.sleep(0.1)
    assert api.show(uuid)["host"] == "slow"
    slow_host.stop(signal.SIGKILL)
    slow_host.start()
    deployment.cluster.wait_ready({"compute@slow"})
    view = api.wait(uuid, "ERROR", timeout=30)
    assert view["fault"]["message"].endswith("interrupted by a restart of slow")
    report = api.audit()
    assert report["leaks"] == 0, report
    slow = next(h for h in api.list_hosts() if h["host"] == "slow")
    assert (slow["vcpus_used"], slow["memory_mb_used"]) == (0, 512)
    api.delete(uuid)


@on_both_brokers
def test_a_worker_killed_in_the_middle_of_a_resize_resumes_and_leaks_nothing(
    deployment: Deployment, slow_host: Worker
) -> None:
    import signal

    with contextlib.suppress(FlavorExists):
        api.create_flavor("it.small.kill", 1, 1024, 1)
    with contextlib.suppress(FlavorExists):
        api.create_flavor("it.medium.kill", 2, 2048, 1)
    [uuid] = api.boot("moving", "it.small.kill", "cirros", availability_zone="nova:host1")
    api.wait(uuid, "ACTIVE", timeout=30)
    api.resize(uuid, "it.medium.kill")  # the slow host has the most free RAM: it is chosen
    deadline = time.monotonic() + 30
    while api.show(uuid)["task_state"] != "resize_finish":
        assert time.monotonic() < deadline, api.show(uuid)
        time.sleep(0.1)
    assert api.show(uuid)["host"] == "slow"
    slow_host.stop(signal.SIGKILL)  # mid finish_resize, its guest half started
    slow_host.start()
    deployment.cluster.wait_ready({"compute@slow"})
    view = api.wait(uuid, "VERIFY_RESIZE", timeout=90)  # the step comes back and resumes
    assert view["task_state"] is None and view["flavor"]["name"] == "it.medium.kill"
    # The same message (task id) was delivered again and counted (the redelivery bound,
    # ``[celery] max_delivery_attempts``, is checked against this count).
    assert _deliveries(uuid, "compute.finish_resize") == [2]
    assert api.diagnostics(uuid)["vcpus"] == 2
    report = api.audit()
    assert report["leaks"] == 0, report
    api.confirm_resize(uuid)
    api.wait(uuid, "ACTIVE", timeout=30)
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)
    assert api.audit()["leaks"] == 0


def _deliveries(uuid: str, task: str) -> list[int]:
    """How many times each ``task`` step of the server's workflow was delivered."""
    steps = [step for op in api.timeline(uuid)["operations"] for step in op["steps"]]
    return [step["deliveries"] for step in steps if step["task"] == task]
