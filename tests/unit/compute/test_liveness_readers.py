"""Services' liveness apart (``models.liveness``): heartbeats write ``service_liveness``
(on SQLite a file of its own) and every reader reads it there: a service up or down, the
scheduler's candidates, the API's listings. Readers on SQLite and PostgreSQL (skipped
without a local server); the API, whose database is the unit tier's, on SQLite."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import time

import pytest
from sqlalchemy import select

from compute.servicegroup import COMPUTE, heartbeat, is_up, register_service, service_dict
from compute.sessions import sessions_for
from models import Service, ServiceLiveness, utcnow
from models.db import session_scope
from novaq.exceptions import NoValidHost
from scheduler.candidates import load_candidates
from scheduler.manager import Scheduler
from tests.factories import (
    make_compute_node,
    make_instance,
    make_settings,
    set_last_seen_up,
    spec_for,
)
from workflows import api

LONG_AGO = dt.datetime(2000, 1, 1)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest) -> str:
    name = "migrated_sqlite_url" if request.param == "sqlite" else "migrated_pg_url"
    return str(request.getfixturevalue(name))


def _one_up_one_down(url: str) -> None:
    make_compute_node(url, "up-host")
    make_compute_node(url, "down-host")
    set_last_seen_up(url, LONG_AGO, "down-host")


def _ups(url: str) -> dict[str, bool]:
    settings = make_settings()
    with session_scope(url, read_only=True) as session:
        return {sv.host: is_up(sv, settings) for sv in session.scalars(select(Service))}


def test_a_service_is_up_or_down_by_its_liveness(url: str) -> None:
    _one_up_one_down(url)
    assert _ups(url) == {"up-host": True, "down-host": False}
    with session_scope(url, read_only=True) as session:
        down = session.scalars(select(Service).where(Service.host == "down-host")).one()
        shown = service_dict(down, make_settings())
    assert (shown["state"], shown["report_count"]) == ("down", 1)
    assert shown["last_seen_up"] == LONG_AGO.isoformat()


def test_a_heartbeat_brings_a_down_service_back_up(url: str) -> None:
    _one_up_one_down(url)
    with session_scope(url, read_only=True) as session:
        down = session.scalars(select(Service.id).where(Service.host == "down-host")).one()
    heartbeat(url, down)
    assert _ups(url) == {"up-host": True, "down-host": True}


def test_the_scheduler_leaves_a_down_host_out(url: str) -> None:
    _one_up_one_down(url)
    settings = make_settings()
    with session_scope(url, read_only=True) as session:
        states = {h.host: h.service_up for h in load_candidates(session, settings).hosts}
    assert states == {"up-host": True, "down-host": False}
    set_last_seen_up(url, LONG_AGO, "up-host")
    uuid = make_instance(url)
    with pytest.raises(NoValidHost, match=r"ComputeFilter removed 2 hosts \(2 -> 0\)"):
        Scheduler(settings).select_and_claim(sessions_for(url), spec_for(uuid))


def test_a_registration_rolled_back_writes_no_liveness(url: str) -> None:
    with pytest.raises(RuntimeError), session_scope(url) as session:
        register_service(session, "h", COMPUTE, "compute.h", make_settings())
        raise RuntimeError("the start failed")
    with session_scope(url, read_only=True) as session:
        assert session.scalars(select(ServiceLiveness)).all() == []


def test_a_revived_service_counts_its_report(url: str) -> None:
    for _ in range(2):
        with session_scope(url) as session:
            service = register_service(session, "h", COMPUTE, "compute.h", make_settings())
            service_id = service.id
    with session_scope(url, read_only=True) as session:
        live = session.get(ServiceLiveness, service_id)
        assert live is not None and live.report_count == 2


def test_a_heartbeat_goes_through_while_another_process_holds_the_main_write_lock(
    db_url: str,
) -> None:
    make_compute_node(db_url, "host1")
    set_last_seen_up(db_url, LONG_AGO, "host1")
    with session_scope(db_url, read_only=True) as session:
        service_id = session.scalars(select(Service.id)).one()
    holder = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # held, as a worker's step holds it
        holder.execute("UPDATE services SET version = version")
        beat = threading.Thread(target=heartbeat, args=(db_url, service_id))
        started = time.monotonic()
        beat.start()
        beat.join(timeout=5)
        took = time.monotonic() - started
        assert not beat.is_alive()
        assert took < 0.5  # (a wait for the main lock would last its busy_timeout, 30 s)
        assert _ups(db_url) == {"host1": True}  # read while the lock is still held
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_the_api_lists_hosts_and_services_by_their_liveness(db_url: str) -> None:
    _one_up_one_down(db_url)
    services = {s["host"]: s for s in api.list_services()}
    assert {h: s["state"] for h, s in services.items()} == {"up-host": "up", "down-host": "down"}
    assert services["down-host"]["last_seen_up"] == LONG_AGO.isoformat()
    hosts = {h["host"]: h["state"] for h in api.list_hosts()}
    assert hosts == {"up-host": "up", "down-host": "down"}
    zones = api.list_availability_zones()
    available = {
        host: state["available"]
        for zone in zones
        for host, by_binary in zone["hosts"].items()
        for state in by_binary.values()
    }
    assert available == {"up-host": True, "down-host": False}
    assert utcnow() - dt.timedelta(minutes=1) < dt.datetime.fromisoformat(
        services["up-host"]["last_seen_up"]
    )
