"""A database outage in the middle of a step, on real workers: the workers reach
PostgreSQL through a TCP proxy of the test's own (``tests.tcp_proxy``), which refuses new
connections and cuts the open ones for 12 s while a step is held at a fault point
(``novaq.fault_points``); the shared PostgreSQL itself never stops. The step waits the
outage out (``[database] outage_tolerance_s``) and ends as it would have without it; a
step that fails while the database is down is undone by its errback once it is back.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from compute.operations import LIFECYCLE_ERRBACK
from models import ComputeNode, Service, TaskDelivery
from models.db import session_scope
from novaq import fault_points
from tests.integration.checks import assert_no_leaks, flavor
from tests.integration.conftest import Cluster
from tests.tcp_proxy import TcpProxy
from workflows import api, dispatch
from workflows.canvas import step

pytestmark = pytest.mark.integration

HOST = "dbhost"
OUTAGE_S = 12.0


@pytest.fixture
def faults(tmp_path: Path) -> Path:
    directory = tmp_path / "faults"
    directory.mkdir()
    return directory


@pytest.fixture
def behind_proxy(
    request: pytest.FixtureRequest,
    services: str,
    proxy: TcpProxy,
    faults: Path,
    state_dir: Path,
) -> Iterator[Cluster]:
    """A scheduler and the compute host ``dbhost`` whose database is the proxy, with fault
    points armed from ``faults``. They wait up to 60 s (or the test's parameter) for the
    database, trying every 0.5-1 s.

    NOTE: the tier's other workers share the Redis database and sweep its unacknowledged
    messages after their visibility timeout (15 s): a step here is held at most about
    OUTAGE_S + 1.5 s, so none is handed out twice."""
    env = {
        "NOVAQ_DATABASE_URL": services.replace(":5432/", f":{proxy.port}/"),
        fault_points.ENV: str(faults),
        "NOVAQ_DATABASE__OUTAGE_TOLERANCE_S": str(getattr(request, "param", 60)),
        "NOVAQ_DATABASE__DB_RETRY_INTERVAL": "0.5",
        "NOVAQ_DATABASE__DB_MAX_RETRY_INTERVAL": "1",
        "NOVAQ_CELERY__VISIBILITY_TIMEOUT": "300",
    }
    cluster = Cluster(state_dir)
    cluster.add("db-scheduler", "scheduler", "scheduler@dbit", "it-scheduler", extra_env=env)
    cluster.add(HOST, f"compute.{HOST}", f"compute@{HOST}", HOST, extra_env=env)
    try:
        cluster.wait_ready({"scheduler@dbit", f"compute@{HOST}"})
        _wait_host_up()
        yield cluster
    finally:
        proxy.restore()
        cluster.stop()
        with session_scope(services) as session:  # forget the host: later tests never see it
            session.execute(delete(Service).where(Service.host == HOST))
            session.execute(delete(ComputeNode).where(ComputeNode.host == HOST))


def _wait_host_up(timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(s["host"] == HOST and s["up"] for s in api.list_services()):
        assert time.monotonic() < deadline, f"{HOST} is not up"
        time.sleep(0.2)


@contextlib.contextmanager
def outage_at(proxy: TcpProxy, faults: Path, point: str) -> Iterator[None]:
    """Hold the step at ``point`` (the block sends it), then take the database away (new
    connections refused, open ones cut), let the step go on, and bring the database back
    after ``OUTAGE_S``."""
    fault_points.arm_pause(faults, point)
    yield
    fault_points.wait_reached(faults, point, timeout_s=60)
    proxy.refuse()
    fault_points.release(faults, point)
    time.sleep(OUTAGE_S)
    proxy.restore()


def _boot(cleanup: list[str], name: str) -> str:
    [uuid] = api.boot(name, flavor("it.db", 1, 512), "cirros", availability_zone=f"nova:{HOST}")
    cleanup.append(uuid)
    return uuid


def _events(uuid: str, action: str) -> list[tuple[str, str | None]]:
    [found] = [a for a in api.list_actions(uuid) if a["action"] == action]
    return [(e["event"], e["result"]) for e in found["events"]]


def _guests() -> list[str]:
    view: dict[str, Any] = dispatch.call(step("compute.hypervisor_view", host=HOST), 30)
    return sorted(d["uuid"] for d in view["domains"])


def _nothing_in_flight(db_url: str) -> None:
    """No delivery record of this host's is left behind (every step returned, and forgot
    it). Another module's, in the tier's shared database, is not this test's: a host it
    killed and left dead keeps its step's record, as it should."""
    deadline = time.monotonic() + 30
    while True:
        with session_scope(db_url) as session:
            left = session.scalar(
                select(func.count())
                .select_from(TaskDelivery)
                .where(TaskDelivery.task_name.like("compute.%"), TaskDelivery.host == HOST)
            )
        if left == 0:
            return
        assert time.monotonic() < deadline, f"{left} delivery records left"
        time.sleep(0.5)


def test_a_build_whose_finish_meets_an_outage_ends_active_with_one_guest(
    services: str, behind_proxy: Cluster, proxy: TcpProxy, faults: Path, cleanup: list[str]
) -> None:
    with outage_at(proxy, faults, "build:finish"):
        uuid = _boot(cleanup, "db-build")
    assert api.show(uuid)["task_state"] == "spawning"  # it waited: nothing moved yet
    view = api.wait(uuid, "ACTIVE", timeout=60)
    assert (view["host"], view["task_state"], view["fault"]) == (HOST, None, None)
    assert _events(uuid, "create") == [("compute__do_build_and_run_instance", "Success")]
    assert _guests() == [uuid]
    _wait_host_up()
    assert_no_leaks([HOST])
    _nothing_in_flight(services)
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)
    assert _guests() == []
    assert_no_leaks([HOST])


@pytest.mark.parametrize("behind_proxy", [5], indirect=True)  # tolerance (s) < OUTAGE_S
def test_a_build_whose_outage_outlasts_the_tolerance_errors_out_without_a_leak(
    services: str, behind_proxy: Cluster, proxy: TcpProxy, faults: Path, cleanup: list[str]
) -> None:
    """Past the bound the build is not left spawning: its finish gives up after 5 s, its
    undo destroys the guest at once and waits 5 s more for the database, and its errback
    (5 s of its own) errors the build out and releases the claim once the database is
    back at 12 s."""
    with outage_at(proxy, faults, "build:finish"):
        uuid = _boot(cleanup, "db-too-long")
    view = api.wait(uuid, "ERROR", timeout=60)
    assert view["fault"]["message"].startswith("database is unavailable")
    assert view["host"] is None
    assert _guests() == []
    _wait_host_up()
    assert_no_leaks([HOST])
    _nothing_in_flight(services)


def test_a_stop_whose_act_meets_an_outage_ends_shutoff(
    services: str, behind_proxy: Cluster, proxy: TcpProxy, faults: Path, cleanup: list[str]
) -> None:
    uuid = _boot(cleanup, "db-stop")
    api.wait(uuid, "ACTIVE", timeout=60)
    with outage_at(proxy, faults, "stop:act"):
        api.stop(uuid)
    view = api.wait(uuid, "SHUTOFF", timeout=60)
    assert (view["task_state"], view["fault"], view["power_state"]) == (None, None, 4)
    assert _events(uuid, "stop") == [("compute_stop_instance", "Success")]
    _wait_host_up()
    assert_no_leaks([HOST])
    _nothing_in_flight(services)


def test_a_step_delivered_while_the_database_is_down_waits_for_it(
    services: str, behind_proxy: Cluster, proxy: TcpProxy, cleanup: list[str]
) -> None:
    """The message arrives during the outage: counting its delivery, then the whole step,
    wait for the database (the API, on the test's own connection, wrote the request)."""
    uuid = _boot(cleanup, "db-late")
    api.wait(uuid, "ACTIVE", timeout=60)
    proxy.refuse()
    api.stop(uuid)  # within service_down_time of the host's last heartbeat
    time.sleep(OUTAGE_S)
    assert api.show(uuid)["task_state"] == "powering-off"
    proxy.restore()
    view = api.wait(uuid, "SHUTOFF", timeout=60)
    assert (view["task_state"], view["fault"]) == (None, None)
    assert _events(uuid, "stop") == [("compute_stop_instance", "Success")]
    _wait_host_up()
    assert_no_leaks([HOST])
    _nothing_in_flight(services)


@pytest.mark.parametrize("behind_proxy", [8], indirect=True)  # tolerance (s) < OUTAGE_S
def test_a_step_failing_while_the_database_is_down_is_undone_by_its_errback(
    services: str,
    behind_proxy: Cluster,
    proxy: TcpProxy,
    faults: Path,
    state_dir: Path,
    cleanup: list[str],
) -> None:
    """The pause's act needs no database: the guest pauses during the outage, then the
    step fails at its finish (an injected fault). Its own writes give up after the 8 s
    budget with the database still down; its errback, which runs in the worker with a
    budget of its own, waits for the database and undoes the step: task cleared,
    vm_state kept, the fault recorded."""
    uuid = _boot(cleanup, "db-errback")
    api.wait(uuid, "ACTIVE", timeout=60)
    log = state_dir / f"{HOST}.log"
    fault_points.arm_pause(faults, "pause:act")
    api.pause(uuid)
    fault_points.wait_reached(faults, "pause:act", timeout_s=60)
    proxy.refuse()
    fault_points.arm_raise(faults, "pause:finish")
    fault_points.release(faults, "pause:act")
    time.sleep(OUTAGE_S)
    assert api.show(uuid)["task_state"] == "pausing"  # nothing could be written yet
    errback = f"{LIFECYCLE_ERRBACK}: Opening a database transaction"
    assert errback in log.read_text(errors="replace")  # it is waiting
    proxy.restore()
    deadline = time.monotonic() + 60
    while (view := api.show(uuid))["task_state"] is not None:
        assert time.monotonic() < deadline, view
        time.sleep(0.2)
    assert view["vm_state"] == "active"
    assert view["fault"]["message"] == "fault injected at pause:finish"
    _wait_host_up()
    assert_no_leaks([HOST])
    _nothing_in_flight(services)
