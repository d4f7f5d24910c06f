from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import select

from compute.servicegroup import COMPUTE, heartbeat, is_up, register_service, service_dict
from models import Service, db, liveness, utcnow
from models.db import dispose_all, session_scope
from models.migrate import upgrade
from tasks.waiting import until_database_answers
from tests.factories import make_settings, set_last_seen_up


def test_register_creates_then_revives_the_same_row(db_url: str) -> None:
    settings = make_settings()
    with session_scope(db_url) as session:
        first = register_service(session, "host1", COMPUTE, "compute.host1", settings).id
    with session_scope(db_url) as session:
        again = register_service(session, "host1", COMPUTE, "compute.host1", settings)
        assert again.id == first and again.report_count == 2
        assert len(session.scalars(select(Service)).all()) == 1


def test_new_services_start_disabled_when_enable_new_services_is_off(db_url: str) -> None:
    with session_scope(db_url) as session:
        service = register_service(
            session, "host1", COMPUTE, "compute.host1", make_settings(enable_new_services=False)
        )
        assert service.disabled and service.disabled_reason


def test_heartbeat_counts_reports_and_stamps_last_seen_up(db_url: str) -> None:
    with session_scope(db_url) as session:
        service_id = register_service(session, "h", COMPUTE, "compute.h", make_settings()).id
    set_last_seen_up(db_url, dt.datetime(2020, 1, 1))
    heartbeat(db_url, service_id)
    with session_scope(db_url) as session:
        service = session.get(Service, service_id)
        assert service is not None and service.report_count == 2
        assert service.last_seen_up is not None and service.last_seen_up.year > 2020


def _service(last_seen_s_ago: float, forced_down: bool = False) -> Service:
    now = utcnow()
    return Service(
        host="h",
        binary=COMPUTE,
        last_seen_up=now - dt.timedelta(seconds=last_seen_s_ago),
        created_at=now,
        forced_down=forced_down,
        disabled=False,
        report_count=1,
    )


def test_a_service_is_up_while_its_last_heartbeat_is_younger_than_service_down_time() -> None:
    settings = make_settings(service_down_time=60)
    assert is_up(_service(59), settings)
    assert not is_up(_service(61), settings)
    assert not is_up(_service(0, forced_down=True), settings)


def test_clock_skew_either_way_is_tolerated_as_nova_does() -> None:
    assert is_up(_service(-30), make_settings(service_down_time=60))


def test_service_down_time_below_report_interval_uses_two_and_a_half_intervals() -> None:
    settings = make_settings(report_interval=10, service_down_time=5)
    assert is_up(_service(24), settings) and not is_up(_service(26), settings)


def test_service_dict_says_state_and_status() -> None:
    view = service_dict(_service(1), make_settings())
    assert (view["state"], view["status"], view["up"]) == ("up", "enabled", True)


def test_a_registration_whose_liveness_report_meets_an_outage_is_waited_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker's start registers its service; the liveness report, written once that
    transaction has committed, finds the liveness file locked past the busy timeout.
    The registration is made again once the database answers, as every start-up step
    waits out an outage, instead of the worker dying of the ``InvalidRequestError``
    SQLAlchemy raised when ``session_scope`` then asked to roll back the committed
    transaction (the integration tier's restarted workers, on a loaded machine)."""
    monkeypatch.setattr(db, "_BUSY_TIMEOUT_MS", 200)  # read as each engine is made
    url = f"sqlite:///{tmp_path}/nova.sqlite"
    upgrade(url)
    path = liveness.sqlite_file(str(tmp_path / "nova.sqlite"))
    assert path is not None and Path(path).exists()
    locker = sqlite3.connect(path, isolation_level=None, timeout=0)
    locker.execute("BEGIN IMMEDIATE")  # another writer holds the liveness file
    attempts: list[int] = []

    def register() -> int:
        attempts.append(1)
        with session_scope(url) as session:
            return register_service(session, "h", COMPUTE, "compute.h", make_settings()).id

    def between_waits() -> None:  # the outage ends while the start-up waits
        if locker.in_transaction:
            locker.execute("ROLLBACK")

    try:
        service_id = until_database_answers("Registering h", register, should_stop=between_waits)
        with session_scope(url) as session:
            service = session.get(Service, service_id)
            assert service is not None and service.last_seen_up is not None
            assert service.report_count == 1
            assert len(session.scalars(select(Service)).all()) == 1
        assert len(attempts) == 2
    finally:
        locker.close()
        dispose_all()  # no engine made with the short busy timeout outlives the test
