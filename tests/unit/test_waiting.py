"""A worker's or beat's start waits for a database that does not answer yet
(``tasks/waiting.py``): it retries what needs the database, says so once, goes on when
the database answers, raises anything else at once, and ends the wait on a stop."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError, OperationalError

from models.db import session_scope
from novaq.exceptions import ServiceUnavailable
from tasks.waiting import database_unreachable, until_database_answers


def _probe(url: str) -> int:
    with session_scope(url) as session:
        return int(session.execute(text("SELECT 1")).scalar_one())


def test_the_start_waits_for_a_database_that_cannot_be_opened_yet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A SQLite file in a directory that does not exist: a real "unable to open database
    # file", until the third attempt creates the directory.
    directory = tmp_path / "not-yet"
    url = f"sqlite:///{directory}/db.sqlite"
    attempts = 0

    def register() -> int:
        nonlocal attempts
        attempts += 1
        if attempts == 3:
            directory.mkdir()
        return _probe(url)

    caplog.set_level(logging.INFO)
    assert until_database_answers("Registering compute service h", register, max_wait_s=0.05) == 1
    assert attempts == 3
    waits = [r for r in caplog.records if "the database is unreachable" in r.getMessage()]
    assert len(waits) == 1  # once, not once per attempt
    assert waits[0].levelno == logging.WARNING
    assert waits[0].getMessage().startswith("Registering compute service h: ")
    assert "unable to open database file" in waits[0].getMessage()
    assert "Registering compute service h: the database answered after" in caplog.text


def test_a_database_that_answers_at_once_logs_nothing(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    assert until_database_answers("Registering", lambda: _probe(db_url)) == 1
    assert "database" not in caplog.text


def test_an_error_that_a_database_coming_back_would_not_cure_is_raised_at_once() -> None:
    attempts = []

    def broken() -> None:
        attempts.append(1)
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError, match="a bug"):
        until_database_answers("Registering", broken)
    assert len(attempts) == 1


def test_a_requested_stop_ends_the_wait(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing/db.sqlite"
    checks = 0

    class Stopped(SystemExit):
        pass

    def should_stop() -> None:  # Celery's maybe_shutdown raises once a stop is requested
        nonlocal checks
        checks += 1
        if checks == 3:
            raise Stopped(0)

    with pytest.raises(Stopped):
        until_database_answers("Registering", lambda: _probe(url), should_stop=should_stop)


def test_which_errors_mean_the_database_is_not_there() -> None:
    orig = Exception("connection refused")
    assert database_unreachable(ServiceUnavailable(service="database", reason="refused"))
    assert database_unreachable(OperationalError("SELECT 1", {}, orig))
    assert not database_unreachable(IntegrityError("INSERT", {}, orig))
    assert not database_unreachable(ValueError("no"))
