"""The service heartbeat runs on the worker's own timer (``celery.utils.timer2.Timer`` in
a worker without an event loop, as the unit tier's in-thread workers are): it reports
every interval, survives a failed report (a database outage is logged once, and its end),
and stops when the bootstep stops."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from celery.utils.timer2 import Timer

from compute import servicegroup
from compute.servicegroup import COMPUTE, register_service
from models import Service
from models.db import session_scope
from novaq.exceptions import ServiceUnavailable
from tasks.bootsteps import Heartbeat
from tests.factories import make_settings

INTERVAL_S = 0.05


@pytest.fixture
def timer() -> Iterator[Timer]:
    timer = Timer()
    yield timer
    timer.stop()


def _service(db_url: str) -> int:
    with session_scope(db_url) as session:
        return register_service(session, "h", COMPUTE, "compute.h", make_settings()).id


def _reports(db_url: str, service_id: int) -> int:
    with session_scope(db_url) as session:
        service = session.get(Service, service_id)
        assert service is not None and service.last_seen_up is not None
        return service.report_count


def _wait_for(db_url: str, service_id: int, count: int) -> None:
    deadline = time.monotonic() + 10
    while _reports(db_url, service_id) < count:
        assert time.monotonic() < deadline, "the heartbeat did not report"
        time.sleep(INTERVAL_S)


def test_the_heartbeat_reports_on_the_timer_until_stopped(db_url: str, timer: Timer) -> None:
    service_id = _service(db_url)  # report 1: the registration
    beat = Heartbeat(timer, db_url, service_id, INTERVAL_S)
    beat.start()
    _wait_for(db_url, service_id, 4)
    beat.stop()
    time.sleep(2 * INTERVAL_S)  # a report already running may still finish
    stopped = _reports(db_url, service_id)
    time.sleep(5 * INTERVAL_S)
    assert _reports(db_url, service_id) == stopped
    beat.stop()  # idempotent


def test_a_failed_report_is_logged_and_the_next_one_counts(
    db_url: str, timer: Timer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service_id = _service(db_url)
    real = servicegroup.heartbeat
    failures = iter([True])

    def flaky(url: str, sid: int) -> None:
        if next(failures, False):
            raise OSError("database went away")
        real(url, sid)

    monkeypatch.setattr(servicegroup, "heartbeat", flaky)
    beat = Heartbeat(timer, db_url, service_id, INTERVAL_S)
    beat.start()
    _wait_for(db_url, service_id, 3)
    beat.stop()
    assert f"Heartbeat of service {service_id} failed" in caplog.text


def test_a_database_outage_is_logged_once_and_so_is_its_end(
    db_url: str, timer: Timer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    service_id = _service(db_url)
    real = servicegroup.heartbeat
    outage = iter([True, True, True])

    def refused(url: str, sid: int) -> None:
        if next(outage, False):
            raise ServiceUnavailable(service="database", reason="Connection refused")
        real(url, sid)

    monkeypatch.setattr(servicegroup, "heartbeat", refused)
    beat = Heartbeat(timer, db_url, service_id, INTERVAL_S)
    beat.start()
    _wait_for(db_url, service_id, 3)
    beat.stop()
    lost = [r for r in caplog.records if "lost connection to the database" in r.getMessage()]
    assert len(lost) == 1 and lost[0].exc_info is None  # one line, no traceback
    assert "Connection refused" in lost[0].getMessage()
    assert f"Heartbeat of service {service_id}: recovered, reporting again" in caplog.text
