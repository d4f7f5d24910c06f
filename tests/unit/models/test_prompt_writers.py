"""How a writer waits for SQLite's write lock (``models.db._begin_promptly``): the API's
writers (every process but a worker's) try it again every ``PROMPT_POLL_S`` instead of
sleeping in SQLite's busy handler, whose growing steps (1, 2, 5, 10... ms) overslept the
moment the lock came free; a worker's writers (``patient_writers``) wait in the busy
handler as before. Either way the connection keeps its ``busy_timeout`` for the rest."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import event, text

from models import db
from models.db import get_engine, session_scope

TABLE = "novaq_prompt_probe"


@pytest.fixture
def url(empty_sqlite_url: str) -> str:
    with session_scope(empty_sqlite_url) as session:
        session.execute(text(f"CREATE TABLE {TABLE} (n INTEGER)"))
    return empty_sqlite_url


@pytest.fixture(autouse=True)
def _prompt() -> Iterator[None]:
    """This process's writers prompt, as an API's (a worker started in-process by an
    earlier test made them patient), and as they were afterwards."""
    was, db._Writers.patient = db._Writers.patient, False
    try:
        yield
    finally:
        db._Writers.patient = was


@pytest.fixture
def patient() -> None:
    db.patient_writers()


def _held_then_released(url: str, after_s: float) -> threading.Thread:
    """Another connection holds the write lock, and lets it go after ``after_s``."""
    holder = sqlite3.connect(
        url.removeprefix("sqlite:///"), isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(f"INSERT INTO {TABLE} VALUES (1)")
    stop = threading.Event()

    def release() -> None:
        stop.wait(after_s)
        holder.execute("COMMIT")
        holder.close()

    thread = threading.Thread(target=release)
    thread.start()
    return thread


def _begins_tried(url: str) -> list[str]:
    """Every ``BEGIN IMMEDIATE`` the writers' connection starts (SQLite's own trace, so
    the tries made on the driver count too); the engine's one pooled connection is made
    first so the trace is on it."""
    tried: list[str] = []
    with get_engine(url).connect() as conn:
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        driver.set_trace_callback(lambda sql: tried.append(sql) if "IMMEDIATE" in sql else None)
    return tried


def _busy_timeout(url: str) -> int:
    with get_engine(url).connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA busy_timeout").scalar_one())


def test_an_api_writer_tries_the_taken_lock_again_until_it_is_free(url: str) -> None:
    tried = _begins_tried(url)
    releaser = _held_then_released(url, after_s=0.05)
    with session_scope(url) as session:
        session.execute(text(f"INSERT INTO {TABLE} VALUES (2)"))
    releaser.join()
    assert len(tried) >= 2  # tries of its own, not the busy handler's sleeps
    with session_scope(url, read_only=True) as session:
        assert session.execute(text(f"SELECT n FROM {TABLE} ORDER BY n")).scalars().all() == [1, 2]
    assert _busy_timeout(url) == 30000  # only the tries had none


def test_a_workers_writer_waits_in_the_busy_handler(url: str, patient: None) -> None:
    tried = _begins_tried(url)
    releaser = _held_then_released(url, after_s=0.05)
    with session_scope(url) as session:
        session.execute(text(f"INSERT INTO {TABLE} VALUES (2)"))
    releaser.join()
    assert len(tried) == 1
    assert _busy_timeout(url) == 30000


def test_a_free_lock_is_taken_by_one_begin_seen_as_a_statement(url: str) -> None:
    seen: list[str] = []
    event.listen(get_engine(url), "before_cursor_execute", lambda *a: seen.append(a[2]))
    with session_scope(url) as session:
        session.execute(text(f"INSERT INTO {TABLE} VALUES (3)"))
    assert [s for s in seen if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]


def test_past_its_polling_a_writer_waits_as_any_writer_and_fails_classified(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PROMPT_WAIT_S", 0.02)
    monkeypatch.setattr(db, "_BUSY_TIMEOUT_MS", 50)  # the fallback's wait, shortened
    releaser = _held_then_released(url, after_s=1.0)
    with pytest.raises(db.DatabaseUnavailable, match="locked"), session_scope(url):
        pass
    releaser.join()
