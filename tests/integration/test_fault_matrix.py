"""The fault matrix: for each step of build, delete, a cold migration (prep, resize,
finish), confirm, revert and a lifecycle operation (stop), a fault lands at an exact point
of the step (``novaq.fault_points``), and the operation must end completed or undone with
a fault: nothing stuck in a task_state, nothing left in flight, no leak.

Faults here: the worker SIGKILLed in the middle of the step (then restarted, as a
supervisor would), and the publish failing after the API's database write. The broker's
SIGKILL and the database refusing connections have their own files
(``test_broker_restart.py``, ``test_database_outage.py``), which need a broker and a
database of their own to kill.

The reaper of operations in flight is run by the test (``compute.periodic.reaper``, the
body of the beat task ``_reap_operations_in_flight``) every second, as beat would every
``operation_reap_interval``.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from novaq import fault_points
from novaq.exceptions import FlavorExists
from tests.integration.checks import assert_no_leaks
from tests.integration.fault_matrix import FLAVOR, Case, make_cases, reap_until_settled, records
from tests.integration.workers import Cluster, Worker
from workflows import api

pytestmark = pytest.mark.integration

HOSTS = ("fm1", "fm2")


@pytest.fixture(scope="module")
def faults(two_hosts: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Two compute hosts of the matrix's own, whose workers honour fault points."""
    directory = tmp_path_factory.mktemp("fault-points")
    env = {fault_points.ENV: str(directory)}
    for host in HOSTS:
        two_hosts.add(host, f"compute.{host}", f"compute@{host}", host, extra_env=env)
    two_hosts.wait_ready({f"compute@{h}" for h in HOSTS})
    with contextlib.suppress(FlavorExists):
        api.create_flavor(FLAVOR, 1, 512, 1)
    yield directory
    for host in HOSTS:
        two_hosts.retire(host, "fault matrix over")


CASES = [c for c in make_cases("nova", *HOSTS) if c.name != "migrate"]


def _worker_of(cluster: Cluster, pid: int) -> Worker:
    for host in HOSTS:
        worker = cluster.workers[host]
        if worker.proc is not None and worker.proc.pid == pid:
            return worker
    # A prefork child: its worker is its parent (threads pool: the worker itself).
    for host in HOSTS:
        worker = cluster.workers[host]
        if worker.proc is not None and Path(f"/proc/{pid}/status").exists():
            status = Path(f"/proc/{pid}/status").read_text()
            if f"PPid:\t{worker.proc.pid}\n" in status:
                return worker
    raise AssertionError(f"no matrix worker has pid {pid}")


def _cleanup(uuid: str | None) -> None:
    if uuid is None:
        return
    with contextlib.suppress(Exception):
        if api.show(uuid)["status"] != "DELETED":
            api.delete(uuid)
            api.wait(uuid, "DELETED", timeout=60)


def _killed_mid_step(case: Case, faults: Path, cluster: Cluster) -> tuple[str, Worker]:
    """Ask for ``case``'s operation and SIGKILL the worker that reaches its fault point;
    the server and the dead worker."""
    uuid = case.prepare()
    fault_points.arm_pause(faults, case.point)
    try:
        uuid = case.request(uuid)
        pid = fault_points.wait_reached(faults, case.point, timeout_s=60)
        victim = _worker_of(cluster, pid)
        victim.stop(signal.SIGKILL)
    finally:
        fault_points.release(faults, case.point)
    return uuid, victim


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_worker_killed_mid_step(case: Case, faults: Path, two_hosts: Cluster) -> None:
    try:
        uuid, _ = _killed_mid_step(case, faults, two_hosts)
    finally:
        for worker in (two_hosts.workers[h] for h in HOSTS):
            if not worker.alive():
                worker.start()
        two_hosts.wait_ready({f"compute@{h}" for h in HOSTS})
    view, reaped = reap_until_settled(uuid, case.ends)
    fault = (view.get("fault") or {}).get("message")
    print(f"{case.name}: {view['status']} fault={fault} reaper={sorted(reaped)}")
    if view["status"] != case.ends[0]:
        assert fault, view  # undone: with a fault that says why
    # The kill is noticed at the worker's restart, not after the visibility timeout.
    assert ("resend" in reaped) == case.resent, reaped
    assert_no_leaks(HOSTS)
    _cleanup(uuid)
    assert_no_leaks(HOSTS)


PUBLISH_CASES = [
    c
    for c in make_cases("nova", *HOSTS)
    if c.name in ("build", "delete", "confirm", "revert", "stop", "migrate")
]


@pytest.mark.parametrize("case", PUBLISH_CASES, ids=[c.name for c in PUBLISH_CASES])
def test_a_publish_failing_after_the_write_changes_nothing(
    case: Case, faults: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from novaq.exceptions import ServiceUnavailable

    uuid = case.prepare()
    before = api.show(uuid) if uuid else None
    servers_before = {s["uuid"] for s in api.list_instances()}
    monkeypatch.setenv(fault_points.ENV, str(faults))
    fault_points.arm_raise(faults, "publish:*")
    with pytest.raises(ServiceUnavailable):
        case.request(uuid)
    monkeypatch.delenv(fault_points.ENV)
    if uuid is None:  # a boot: no server left behind
        assert {s["uuid"] for s in api.list_instances()} == servers_before
    else:
        after = api.show(uuid)
        assert before is not None
        assert (after["status"], after["task_state"]) == (before["status"], before["task_state"])
        assert not records(uuid)
    # Once the broker answers again, the same request goes through.
    uuid = case.request(uuid)
    expected = {
        "build": "ACTIVE",
        "delete": "DELETED",
        "confirm": "ACTIVE",
        "revert": "ACTIVE",
        "stop": "SHUTOFF",
        "migrate": "VERIFY_RESIZE",
    }[case.name]
    api.wait(uuid, expected, timeout=60)
    assert_no_leaks(HOSTS)
    _cleanup(uuid)


LOST_HOST_CASES = [c for c in CASES if c.name in ("stop", "migrate-resize", "confirm", "build")]


@pytest.mark.parametrize("case", LOST_HOST_CASES, ids=[c.name for c in LOST_HOST_CASES])
def test_a_host_lost_mid_step(case: Case, faults: Path, two_hosts: Cluster) -> None:
    """The worker dies and does not come back: once its service is down
    (``service_down_time``), the reaper undoes the operation with a fault; when the host
    returns, its late message finds nothing to do and nothing leaks."""
    uuid, victim = _killed_mid_step(case, faults, two_hosts)
    try:
        settled = ("ACTIVE", "ERROR", "SHUTOFF", "VERIFY_RESIZE")
        view, reaped = reap_until_settled(uuid, settled)
        fault = (view.get("fault") or {}).get("message")
        print(f"{case.name} (host lost): {view['status']} fault={fault} reaper={sorted(reaped)}")
        assert "undo" in reaped, reaped
        assert fault and "did not complete" in fault, view
    finally:
        victim.start()
        two_hosts.wait_ready({f"compute@{victim.name}"})
    view, _ = reap_until_settled(uuid, ("ACTIVE", "ERROR", "SHUTOFF", "VERIFY_RESIZE"))
    print(f"{case.name} (host back): {view['status']} task={view.get('task_state')}")
    assert_no_leaks(HOSTS)
    _cleanup(uuid)
    assert_no_leaks(HOSTS)
