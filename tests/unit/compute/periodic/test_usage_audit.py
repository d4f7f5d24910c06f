"""``_instance_usage_audit``: the audit period as Nova computes it, once per period and
host (``task_log``), an ``instance.exists`` for every instance active in the period.
Real SQLite rows; notifications captured by an installed publisher."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from sqlalchemy import select

from compute import notifications
from compute.periodic import PeriodicContext
from compute.periodic.usage_audit import (
    begin_task,
    instance_usage_audit,
    last_completed_audit_period,
)
from compute.sessions import sessions_for
from models import TaskLog
from models.db import session_scope
from novaq.exceptions import ConfigError
from tests.factories import make_instance, make_settings
from tests.unit.compute.conftest import Sent

D = dt.datetime


def _ctx(db_url: str, period: str = "month") -> PeriodicContext:
    settings = make_settings(instance_usage_audit=True, instance_usage_audit_period=period)
    return PeriodicContext(sessions_for(db_url), settings, "host1")


def _task_logs(db_url: str) -> list[TaskLog]:
    with session_scope(db_url) as session:
        rows = list(session.scalars(select(TaskLog)))
        session.expunge_all()
        return rows


def _exists_sent(sent: Sent) -> list[str]:
    return [m["payload"]["nova_object.data"]["uuid"] for m, _ in sent]


# -- the period ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("period", "now", "expected"),
    [
        ("hour", D(2024, 3, 10, 14, 30), (D(2024, 3, 10, 13), D(2024, 3, 10, 14))),
        ("hour@15", D(2024, 3, 10, 14, 30), (D(2024, 3, 10, 13, 15), D(2024, 3, 10, 14, 15))),
        ("hour@45", D(2024, 3, 10, 14, 30), (D(2024, 3, 10, 12, 45), D(2024, 3, 10, 13, 45))),
        ("day", D(2024, 3, 10, 14, 30), (D(2024, 3, 9), D(2024, 3, 10))),
        ("day@18", D(2024, 3, 10, 14, 30), (D(2024, 3, 8, 18), D(2024, 3, 9, 18))),
        ("day@6", D(2024, 3, 1, 7), (D(2024, 2, 29, 6), D(2024, 3, 1, 6))),
        ("month", D(2024, 3, 10), (D(2024, 2, 1), D(2024, 3, 1))),
        ("month", D(2024, 1, 5), (D(2023, 12, 1), D(2024, 1, 1))),
        ("month@15", D(2024, 3, 10), (D(2024, 1, 15), D(2024, 2, 15))),
        ("month@15", D(2024, 3, 20), (D(2024, 2, 15), D(2024, 3, 15))),
        ("month@15", D(2024, 1, 10), (D(2023, 11, 15), D(2023, 12, 15))),
        ("year", D(2024, 3, 10), (D(2023, 1, 1), D(2024, 1, 1))),
        ("year@3", D(2024, 3, 10), (D(2023, 3, 1), D(2024, 3, 1))),
        ("year@3", D(2024, 2, 10), (D(2022, 3, 1), D(2023, 3, 1))),
    ],
)
def test_the_last_completed_period_is_nova_s_for_each_unit_and_offset(
    period: str, now: dt.datetime, expected: tuple[dt.datetime, dt.datetime]
) -> None:
    assert last_completed_audit_period(period, before=now) == expected


def test_a_period_ending_exactly_now_is_not_completed_yet() -> None:
    now = D(2024, 3, 1)
    assert last_completed_audit_period("month", before=now) == (D(2024, 1, 1), D(2024, 2, 1))
    assert last_completed_audit_period("hour", before=D(2024, 3, 1, 14)) == (
        D(2024, 3, 1, 12),
        D(2024, 3, 1, 13),
    )


def test_a_month_offset_past_a_short_month_s_end_starts_on_its_last_day() -> None:
    # Nova raises ValueError here; novaq clamps, and periods still chain.
    assert last_completed_audit_period("month@31", before=D(2024, 3, 10)) == (
        D(2024, 1, 31),
        D(2024, 2, 29),
    )
    assert last_completed_audit_period("month@31", before=D(2024, 4, 1)) == (
        D(2024, 2, 29),
        D(2024, 3, 31),
    )


@pytest.mark.parametrize("period", ["hour@60", "day@24", "month@32", "year@13", "week", "day@x"])
def test_an_invalid_period_is_a_config_error(period: str) -> None:
    with pytest.raises(ConfigError, match="instance_usage_audit_period"):
        last_completed_audit_period(period, before=D(2024, 3, 10))


# -- the audit ----------------------------------------------------------------------


def _instances_around(db_url: str, begin: dt.datetime, end: dt.datetime) -> dict[str, str]:
    """One instance per case of the window, by the name of the case."""
    hour = dt.timedelta(hours=1)
    cases: dict[str, dict[str, Any]] = {
        "running all along": dict(launched_at=begin - hour),
        "launched in the period, deleted after": dict(
            launched_at=begin + hour, terminated_at=end + hour, deleted_at=end + hour
        ),
        "deleted in the period": dict(launched_at=begin - hour, terminated_at=begin + hour),
        "launched at the end": dict(launched_at=end),
        "deleted before": dict(launched_at=begin - 2 * hour, terminated_at=begin - hour),
        "deleted at the beginning": dict(launched_at=begin - 2 * hour, terminated_at=begin),
        "never launched": dict(launched_at=None),
        "on another host": dict(launched_at=begin - hour, host="host2"),
    }
    uuids = {}
    for name, values in cases.items():
        values = {"host": "host1", "vm_state": "active", "task_state": None, **values}
        uuids[name] = make_instance(db_url, display_name=name, **values)
    return uuids


def test_every_instance_active_in_the_period_gets_an_exists_notification(
    db_url: str, sent: Sent
) -> None:
    begin, end = last_completed_audit_period("month")
    uuids = _instances_around(db_url, begin, end)

    result = instance_usage_audit(_ctx(db_url))

    active = [uuids[n] for n in ("running all along", "launched in the period, deleted after")]
    active.append(uuids["deleted in the period"])
    assert sorted(result["instances"]) == sorted(active)
    assert sorted(_exists_sent(sent)) == sorted(active)
    message, priority = sent[0]
    assert (message["event_type"], priority) == ("instance.exists", "INFO")
    assert message["publisher_id"] == "nova-compute:host1"
    payload = message["payload"]
    assert payload["nova_object.name"] == "InstanceExistsPayload"
    audit = payload["nova_object.data"]["audit_period"]["nova_object.data"]
    assert audit == {
        "audit_period_beginning": begin.replace(tzinfo=dt.UTC).isoformat(),
        "audit_period_ending": end.replace(tzinfo=dt.UTC).isoformat(),
    }


def test_the_run_is_recorded_done_in_task_log(db_url: str, sent: Sent) -> None:
    begin, end = last_completed_audit_period("month")
    _instances_around(db_url, begin, end)

    instance_usage_audit(_ctx(db_url))

    [row] = _task_logs(db_url)
    assert (row.task_name, row.host, row.state) == ("instance_usage_audit", "host1", "DONE")
    assert (row.period_beginning, row.period_ending) == (begin, end)
    assert (row.task_items, row.errors) == (3, 0)
    assert re.fullmatch(
        r"Instance usage audit ran for host host1, 3 instances in [0-9.e-]+ seconds\.",
        row.message,
    )


def test_a_second_run_in_the_same_period_does_nothing(db_url: str, sent: Sent) -> None:
    begin, end = last_completed_audit_period("month")
    _instances_around(db_url, begin, end)
    instance_usage_audit(_ctx(db_url))
    sent.clear()

    result = instance_usage_audit(_ctx(db_url))

    assert result["skipped"] == "already audited"
    assert sent == []
    assert len(_task_logs(db_url)) == 1


def test_an_offset_moves_the_audited_period(db_url: str, sent: Sent) -> None:
    instance_usage_audit(_ctx(db_url, "day@6"))

    [row] = _task_logs(db_url)
    assert (row.period_beginning.hour, row.period_ending - row.period_beginning) == (
        6,
        dt.timedelta(days=1),
    )
    assert (row.state, row.task_items) == ("DONE", 0)


def test_each_host_audits_the_period_once_for_itself(db_url: str, sent: Sent) -> None:
    begin, end = last_completed_audit_period("month")
    uuids = _instances_around(db_url, begin, end)
    instance_usage_audit(_ctx(db_url))
    sent.clear()

    other = PeriodicContext(sessions_for(db_url), _ctx(db_url).settings, "host2")
    assert instance_usage_audit(other)["instances"] == [uuids["on another host"]]
    assert sorted(r.host for r in _task_logs(db_url)) == ["host1", "host2"]


def test_a_period_a_racing_run_inserted_first_is_left_to_it(db_url: str) -> None:
    begin, end = last_completed_audit_period("month")
    assert begin_task(sessions_for(db_url), "host1", begin, end, items=0)

    assert not begin_task(sessions_for(db_url), "host1", begin, end, items=0)  # no IntegrityError
    assert [r.state for r in _task_logs(db_url)] == ["RUNNING"]


def test_notifications_that_fail_are_counted_as_errors(db_url: str) -> None:
    begin, end = last_completed_audit_period("month")
    _instances_around(db_url, begin, end)

    def broken(message: dict[str, Any], priority: str) -> None:
        raise ConnectionError("broker down")

    notifications.install(broken)
    try:
        result = instance_usage_audit(_ctx(db_url))
    finally:
        notifications.install(None)

    assert result["errors"] == 3
    [row] = _task_logs(db_url)
    assert (row.state, row.task_items, row.errors) == ("DONE", 3, 3)
