"""celery beat as novaq runs it: a singleton held by a lease in the database (a standby
beat waits for it), Nova's ``run_immediately``, and a schedule that publishes fan-outs
with ``expires``."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from celery import Celery

from compute.periodic import beat_lease
from compute.periodic.schedule import beat_schedule_for
from compute.sessions import sessions_for
from models import BeatLease, utcnow
from models.db import session_scope
from tasks.beat import SecondBeatError
from tests.factories import make_settings
from tests.unit.periodic.queues import drain


def test_a_second_holder_is_refused_until_the_first_releases_or_expires(db_url: str) -> None:
    assert beat_lease.acquire(sessions_for(db_url), "beat-a", 30) is None
    assert beat_lease.acquire(sessions_for(db_url), "beat-a", 30) is None  # ours already: renewed
    other = beat_lease.acquire(sessions_for(db_url), "beat-b", 30)
    assert other is not None and other.holder == "beat-a"
    assert beat_lease.renew(sessions_for(db_url), "beat-a", 30) and not beat_lease.renew(
        sessions_for(db_url), "beat-b", 30
    )
    beat_lease.release(sessions_for(db_url), "beat-a")
    assert beat_lease.acquire(sessions_for(db_url), "beat-b", 30) is None
    # A holder that died stops renewing: its lease expires and can be taken over.
    with session_scope(db_url) as session:
        session.get(BeatLease, "beat").expires_at = utcnow() - dt.timedelta(seconds=1)
    assert beat_lease.holder_of(sessions_for(db_url)) is None
    assert beat_lease.acquire(sessions_for(db_url), "beat-c", 30) is None
    assert not beat_lease.renew(sessions_for(db_url), "beat-b", 30)


@pytest.fixture
def beat_app(db_url: str) -> Iterator[Celery]:
    app = Celery("beat-test", set_as_current=False)
    app.conf.update(
        broker_url="memory://",
        timezone="UTC",
        enable_utc=True,
        beat_schedule=beat_schedule_for(
            make_settings(
                periodic_enable=True,
                periodic={"default_spacing": 2},
                scheduler={"discover_hosts_in_cells_interval": 2},
            )
        ),
    )
    yield app
    app.close()


def _scheduler(app: Celery, path: Path, holder: str = "beat-a"):  # type: ignore[no-untyped-def]
    from tasks.beat import NovaqScheduler

    return NovaqScheduler(app=app, schedule_filename=str(path / "schedule"), lease_holder=holder)


def test_a_second_beat_refuses_to_start_and_names_the_first(
    beat_app: Celery, tmp_path: Path
) -> None:
    first = _scheduler(beat_app, tmp_path / "a")
    (tmp_path / "b").mkdir()
    with pytest.raises(SecondBeatError, match=first.lease_holder):
        _scheduler(beat_app, tmp_path / "b", holder="beat-b")
    first.close()
    second = _scheduler(beat_app, tmp_path / "b", holder="beat-b")  # the first stopped
    second.close()


def test_a_beat_restarted_under_its_holder_takes_back_the_lease_its_killed_predecessor_left(
    beat_app: Celery, tmp_path: Path
) -> None:
    # The first beat is "SIGKILLed": it never closes, its lease stays live.
    _scheduler(beat_app, tmp_path / "a", holder="novaq-up-1")
    (tmp_path / "b").mkdir()
    with pytest.raises(SecondBeatError):  # another holder is refused for the lease's TTL
        _scheduler(beat_app, tmp_path / "b", holder="someone-else")
    again = _scheduler(beat_app, tmp_path / "b", holder="novaq-up-1")  # as novaq up restarts it
    again.close()


def test_the_banner_instance_beat_builds_first_takes_no_lease(
    beat_app: Celery, tmp_path: Path, db_url: str
) -> None:
    from tasks.beat import NovaqScheduler

    NovaqScheduler(app=beat_app, schedule_filename=str(tmp_path / "s"), lazy=True).close()
    assert beat_lease.holder_of(sessions_for(db_url)) is None
    beat = _scheduler(beat_app, tmp_path)
    assert beat_lease.holder_of(sessions_for(db_url)).holder == beat.lease_holder
    beat.close()


def test_a_beat_that_lost_its_lease_stops(beat_app: Celery, tmp_path: Path, db_url: str) -> None:
    beat = _scheduler(beat_app, tmp_path)
    beat_lease.release(sessions_for(db_url), beat.lease_holder)
    assert beat_lease.acquire(sessions_for(db_url), "someone-else", 30) is None
    beat._renewed_at = 0.0  # due for renewal
    with pytest.raises(SecondBeatError, match="lost its lease"):
        beat.tick()
    beat.close()


def test_the_schedulers_run_immediately_entries_are_due_at_start_the_others_later(
    beat_app: Celery, tmp_path: Path
) -> None:
    beat = _scheduler(beat_app, tmp_path)
    try:
        due = {name for name, entry in beat.schedule.items() if entry.is_due()[0]}
        assert due == {"_discover_hosts_in_cells"}
        # The compute ones run at each compute worker's start, not at beat's.
        for name in ("_sync_power_states", "_check_instance_build_time"):
            entry = beat.schedule[name]
            later = entry.is_due()
            assert not later[0] and 0 < later[1] <= entry.schedule.seconds
    finally:
        beat.close()


def test_beat_publishes_fan_outs_that_expire_after_one_spacing(
    beat_app: Celery, tmp_path: Path
) -> None:
    beat = _scheduler(beat_app, tmp_path)
    try:
        # One spacing on: every entry is due.
        for name in ("_sync_power_states", "_cleanup_running_deleted_instances"):
            entry = beat.schedule[name]
            entry.last_run_at -= dt.timedelta(seconds=entry.schedule.seconds)
        beat.tick()  # populates the heap and sends what is due
        beat.tick()
        beat.tick()
        sent = drain(beat_app, "celery")
    finally:
        beat.close()
    assert sent, "nothing was published"
    by_task: dict[str, set[str]] = {}
    for m in sent:
        body = m.decode()
        by_task.setdefault(m.headers["task"], set()).add(body[1].get("task_name", ""))
    assert by_task == {
        "periodic.fan_out": {
            "compute.sync_power_states",
            "compute.cleanup_running_deleted_instances",
        },
        "periodic.discover_hosts_in_cells": {""},  # the scheduler's: sent as it is
    }
    assert all(m.headers["expires"] for m in sent)


def test_a_beat_that_cannot_reach_the_database_publishes_nothing_until_it_renews(
    beat_app: Celery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tasks import beat as beat_module

    beat = _scheduler(beat_app, tmp_path)
    reachable = beat._sessions
    try:
        entry = beat.schedule["_sync_power_states"]
        entry.last_run_at -= dt.timedelta(seconds=entry.schedule.seconds)  # due
        # A real database that cannot be opened: the directory does not exist.
        beat._sessions = sessions_for(f"sqlite:///{tmp_path}/gone/db.sqlite")
        for _ in range(3):
            beat._renewed_at = 0.0  # due for renewal
            assert beat.tick() == beat_module.DATABASE_RETRY_S
        assert drain(beat_app, "celery") == []
        lost = [r for r in caplog.records if "cannot renew its lease" in r.getMessage()]
        assert len(lost) == 1

        beat._sessions = reachable  # the database is back: the lease is still ours
        beat._renewed_at = 0.0
        beat.tick()
        beat.tick()
        sent = drain(beat_app, "celery")
        assert "renewed its lease after the database was unreachable" in caplog.text
        assert "compute.sync_power_states" in {m.decode()[1].get("task_name") for m in sent}
    finally:
        beat._sessions = reachable
        beat.close()


def _wait_until(condition: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_standby_beat_waits_while_the_lease_is_held_and_takes_it_once_it_expires(
    beat_app: Celery,
    tmp_path: Path,
    db_url: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tasks import beat as beat_module

    caplog.set_level(logging.INFO, logger="tasks.beat")
    monkeypatch.setattr(beat_module, "STANDBY_POLL_S", 0.05)
    # The first controller's beat: "SIGKILLed" below, it never closes nor renews again.
    _scheduler(beat_app, tmp_path / "a", holder="ctl-a")
    (tmp_path / "b").mkdir()
    built: list[beat_module.NovaqScheduler] = []

    def standby() -> None:
        built.append(
            beat_module.StandbyScheduler(
                app=beat_app, schedule_filename=str(tmp_path / "b" / "s"), lease_holder="ctl-b"
            )
        )

    waiter = threading.Thread(target=standby, daemon=True)
    waiter.start()
    assert _wait_until(lambda: "standing by: ctl-a holds the beat lease" in caplog.text)
    assert waiter.is_alive() and not built  # it waits rather than exit
    assert beat_lease.holder_of(sessions_for(db_url)).holder == "ctl-a"

    with session_scope(db_url) as session:  # ctl-a's lease runs out
        session.get(BeatLease, "beat").expires_at = utcnow() - dt.timedelta(seconds=1)
    waiter.join(timeout=60)
    assert built, "the standby did not take the lease over"
    try:
        assert beat_lease.holder_of(sessions_for(db_url)).holder == "ctl-b"
        assert "beat ctl-b took over the beat lease from ctl-a" in caplog.text
    finally:
        built[0].close()


def test_the_takeover_bound_is_the_lease_ttl_plus_one_standby_poll() -> None:
    from tasks.beat import LEASE_TTL_S, RENEW_EVERY_S, STANDBY_POLL_S, TAKEOVER_BOUND_S

    assert TAKEOVER_BOUND_S == LEASE_TTL_S + STANDBY_POLL_S
    assert RENEW_EVERY_S < LEASE_TTL_S  # a live holder renews long before its lease ends


def test_a_standby_beat_with_the_lease_free_takes_it_at_once(
    beat_app: Celery, tmp_path: Path, db_url: str
) -> None:
    from tasks.beat import StandbyScheduler

    beat = StandbyScheduler(
        app=beat_app, schedule_filename=str(tmp_path / "s"), lease_holder="ctl-a"
    )
    try:
        assert beat_lease.holder_of(sessions_for(db_url)).holder == "ctl-a"
    finally:
        beat.close()
    assert beat_lease.holder_of(sessions_for(db_url)) is None
