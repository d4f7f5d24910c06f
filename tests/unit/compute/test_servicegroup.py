from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from compute.servicegroup import COMPUTE, heartbeat, is_up, register_service, service_dict
from models import Service, utcnow
from models.db import session_scope
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
