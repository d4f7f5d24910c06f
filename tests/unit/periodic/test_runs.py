"""How a periodic task runs: fanned out to up and enabled hosts only, with ``expires``;
never two runs of one task on one host at once; gate options close a run early; every
run recorded in the database."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from compute.periodic import runs
from compute.periodic.schedule import BY_NAME
from compute.sessions import sessions_for
from models import PeriodicTaskRun, Service, utcnow
from models.db import session_scope
from tasks import app
from tasks.periodic import fan_out, run_periodic, schedulable_hosts
from tests.factories import make_compute_node, set_last_seen_up
from tests.unit.periodic.queues import drain


def test_the_lease_lets_one_run_at_a_time_and_a_stale_one_is_taken_over(db_url: str) -> None:
    assert runs.begin(sessions_for(db_url), "_t", "host1", "runner-a", stale_after=60)
    assert not runs.begin(sessions_for(db_url), "_t", "host1", "runner-b", stale_after=60)
    assert runs.begin(sessions_for(db_url), "_t", "host2", "runner-b", stale_after=60)  # other host
    assert runs.begin(sessions_for(db_url), "_t", "host1", "runner-a", stale_after=60)  # redelivery
    runs.finish(sessions_for(db_url), "_t", "host1", "runner-a", runs.OK, {"done": 1})
    assert runs.begin(sessions_for(db_url), "_t", "host1", "runner-b", stale_after=60)
    with session_scope(db_url) as session:
        row = session.query(PeriodicTaskRun).filter_by(task_name="_t", host="host1").one()
        row.running_since = utcnow() - dt.timedelta(seconds=120)  # runner-b died
    assert runs.begin(sessions_for(db_url), "_t", "host1", "runner-c", stale_after=60)
    # A late finish of the dead runner does not release the new runner's lease.
    runs.finish(sessions_for(db_url), "_t", "host1", "runner-b", runs.ERROR, error="late")
    assert not runs.begin(sessions_for(db_url), "_t", "host1", "runner-d", stale_after=60)
    record = runs.last_runs(sessions_for(db_url))[("_t", "host1")]
    assert record["running"] and record["run_count"] == 1 and record["skip_count"] == 2
    assert record["last_result"] == {"done": 1}


def test_an_overlapping_run_is_skipped_and_does_nothing(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    assert runs.begin(sessions_for(db_url), "update_available_resource", "host1", "other", 3600)
    task = BY_NAME["update_available_resource"]
    assert run_periodic(task, "host1", "me") == {"skipped": "previous run still running"}
    record = runs.last_runs(sessions_for(db_url))[("update_available_resource", "host1")]
    assert record["running"] and record["skip_count"] == 1 and record["run_count"] == 0


def test_a_run_is_recorded_with_its_result(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    result = run_periodic(BY_NAME["update_available_resource"], "host1", "me")
    assert set(result) == {"heals", "actions"}
    record = runs.last_runs(sessions_for(db_url))[("update_available_resource", "host1")]
    assert record["last_status"] == "ok" and not record["running"]
    assert record["run_count"] == 1 and record["last_result"] == result


def test_a_closed_gate_records_a_skip_without_running_the_body(db_url: str) -> None:
    # resize_confirm_window is 0: Nova's task returns at once, and so does novaq's.
    result = run_periodic(BY_NAME["_poll_unconfirmed_resizes"], "host1", "me")
    assert result == {"skipped": "resize_confirm_window is 0"}
    record = runs.last_runs(sessions_for(db_url))[("_poll_unconfirmed_resizes", "host1")]
    assert record["last_status"] == "skipped" and not record["running"]


def test_a_failing_run_is_recorded_as_an_error_and_releases_the_lease(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compute import resource_tracker

    make_compute_node(db_url, "host1")

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("hypervisor went away")

    monkeypatch.setattr(resource_tracker, "update_available_resource", broken)
    with pytest.raises(RuntimeError):
        run_periodic(BY_NAME["update_available_resource"], "host1", "me")
    record = runs.last_runs(sessions_for(db_url))[("update_available_resource", "host1")]
    assert record["last_status"] == "error" and not record["running"]
    assert record["last_error"] == "RuntimeError: hypervisor went away"


def test_the_fan_out_reaches_up_and_enabled_hosts_only_with_expires(db_url: str) -> None:
    for host in ("host1", "host2", "host3", "host4"):
        make_compute_node(db_url, host)
        drain(app, f"compute.{host}")
    with session_scope(db_url) as session:
        services = {s.host: s for s in session.query(Service)}
        services["host2"].disabled = True
        services["host3"].forced_down = True
    set_last_seen_up(db_url, utcnow() - dt.timedelta(seconds=3600), "host4")
    assert schedulable_hosts() == ["host1"]
    assert fan_out("compute.sync_power_states", 7.0) == ["host1"]
    [message] = drain(app, "compute.host1")
    assert message.headers["task"] == "compute.sync_power_states"
    assert message.headers["expires"] is not None
    expires = dt.datetime.fromisoformat(message.headers["expires"])
    left = (expires - dt.datetime.now(dt.UTC)).total_seconds()
    assert 0 < left <= 7
    assert all(drain(app, f"compute.{h}") == [] for h in ("host2", "host3", "host4"))
