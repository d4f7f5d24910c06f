"""Services through the API and the ``novaq service-*`` / ``periodic-*`` commands: disable
and enable with a reason, force down; the scheduler never picks such a host; bad input
changes nothing."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from compute.sessions import sessions_for
from novaq.cli import main
from novaq.exceptions import InvalidInput, NotFound
from tests.factories import make_compute_node
from workflows import api


def _service(host: str) -> dict:  # type: ignore[type-arg]
    return next(s for s in api.list_services() if s["host"] == host)


def test_disable_with_a_reason_then_enable_clears_it(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    view = api.disable_service("host1", reason="  firmware upgrade ")
    assert (view["status"], view["disabled_reason"]) == ("disabled", "firmware upgrade")
    assert _service("host1")["status"] == "disabled"
    view = api.enable_service("host1")
    assert (view["status"], view["disabled_reason"]) == ("enabled", None)


def test_force_down_makes_a_reporting_host_down_until_unset(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    assert _service("host1")["state"] == "up"
    assert api.force_down_service("host1")["state"] == "down"
    assert _service("host1")["forced_down"] is True
    assert api.force_down_service("host1", forced_down=False)["state"] == "up"


def test_bad_service_requests_are_refused_and_change_nothing(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    with pytest.raises(NotFound, match="host9"):
        api.disable_service("host9")
    with pytest.raises(InvalidInput, match="1 to 255 characters"):
        api.disable_service("host1", reason="x" * 256)
    with pytest.raises(InvalidInput, match="1 to 255 characters"):
        api.disable_service("host1", reason="   ")
    with pytest.raises(NotFound, match="novaq-scheduler on host host1"):
        api.enable_service("host1", binary="novaq-scheduler")
    assert _service("host1")["status"] == "enabled"


@pytest.mark.parametrize("how", ["disable", "force_down"])
def test_the_scheduler_never_picks_a_disabled_or_forced_down_host(
    db_url: str, worker: None, how: str
) -> None:
    api.create_flavor("m1", 1, 512, 1)
    if how == "disable":
        api.disable_service("host1", reason="maintenance")
    else:
        api.force_down_service("host1")
    [uuid] = api.boot("vm", "m1", "cirros")
    view = api.wait(uuid, "ERROR", timeout=30)
    assert view["fault"]["message"].startswith("No valid host was found.")
    # The message names what decided (the pre-filter keeps only enabled hosts); the
    # fault's details keep every filter.
    decided = "0 enabled hosts with room" if how == "disable" else "ComputeFilter removed 1 host"
    assert decided in view["fault"]["message"]
    assert "ComputeFilter: " in view["fault"]["details"]
    api.delete(uuid)
    if how == "disable":
        api.enable_service("host1")
    else:
        api.force_down_service("host1", forced_down=False)
    [uuid] = api.boot("vm2", "m1", "cirros")
    assert api.wait(uuid, "ACTIVE", timeout=30)["host"] == "host1"
    api.delete(uuid)
    api.wait(uuid, "DELETED", timeout=30)


def test_service_commands(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    runner = CliRunner()
    result = runner.invoke(main, ["service-disable", "host1", "--reason", "bad disk", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["disabled_reason"] == "bad disk"
    result = runner.invoke(main, ["service-force-down", "host1", "--json"])
    assert json.loads(result.output)["state"] == "down"
    result = runner.invoke(main, ["service-force-down", "host1", "--unset", "--json"])
    assert json.loads(result.output)["state"] == "up"
    result = runner.invoke(main, ["service-enable", "host1", "--json"])
    assert json.loads(result.output)["status"] == "enabled"
    result = runner.invoke(main, ["service-disable", "nohost"])
    assert result.exit_code == 1 and "ComputeHostNotFound" in result.output


def test_periodic_list_shows_every_task_and_its_last_run_per_host(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from compute.periodic import runs
    from novaq.cli.base import console

    monkeypatch.setattr(console, "width", 250)

    runs.begin(sessions_for(db_url), "_sync_power_states", "host1", "r", 60)
    runs.finish(sessions_for(db_url), "_sync_power_states", "host1", "r", runs.OK, {"stopped": []})
    runs.record_skip(
        sessions_for(db_url), "_poll_unconfirmed_resizes", "host2", "resize_confirm_window is 0"
    )
    listed = {t["name"]: t for t in api.list_periodic_tasks()}
    assert len(listed) == 19  # Nova's 18 and novaq's reaper of operations in flight
    sync = listed["_sync_power_states"]
    assert [r["host"] for r in sync["runs"]] == ["host1"]
    assert sync["runs"][0]["last_status"] == "ok" and sync["run_immediately"]
    # The unit tier runs with periodic_enable = false: nothing is scheduled.
    assert not any(t["enabled"] for t in listed.values())
    result = CliRunner().invoke(main, ["periodic-list", "--long"])
    assert result.exit_code == 0, result.output
    assert "_sync_power_states" in result.output and "host1" in result.output
    assert "beat: not running" in result.output
    result = CliRunner().invoke(main, ["periodic-list", "--json"])
    data = json.loads(result.output)
    assert data["beat"] is None and len(data["tasks"]) == 19


def test_periodic_run_refuses_unknown_tasks_and_hosts(db_url: str) -> None:
    make_compute_node(db_url, "host1")
    with pytest.raises(InvalidInput, match="unknown periodic task"):
        api.run_periodic_task("_no_such_task")
    with pytest.raises(NotFound, match="host9"):
        api.run_periodic_task("_sync_power_states", host="host9")
