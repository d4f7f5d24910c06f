"""What a heartbeat costs (issue 16): one short write, a single UPDATE (no SELECT first) in
autocommit on an engine of its own (``models.db.liveness_write``), which readers no longer
hold up: a read-only transaction left open (the scheduler's candidate load, the API's
lookups) takes no SQLite write lock."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import event, select

from compute.servicegroup import COMPUTE, register_service
from models import Service
from models.db import liveness_engine, session_scope
from tasks.bootsteps import Heartbeat
from tests.costs import Sql, counting_sql
from tests.factories import make_settings


@pytest.fixture
def sql(db_url: str) -> Iterator[Sql]:
    with counting_sql(db_url) as seen:
        yield seen


def _service(db_url: str) -> int:
    with session_scope(db_url) as session:
        return register_service(session, "h", COMPUTE, "compute.h", make_settings()).id


def _reports(db_url: str, service_id: int) -> int:
    with session_scope(db_url, read_only=True) as session:
        return int(
            session.scalars(select(Service.report_count).where(Service.id == service_id)).one()
        )


def test_a_heartbeat_is_one_update(db_url: str, sql: Sql) -> None:
    service_id = _service(db_url)
    beat = Heartbeat(None, db_url, service_id, 10.0)
    beat.report()  # the liveness engine connects
    liveness: list[str] = []

    def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        liveness.append(" ".join(statement.split()[:2]).upper())

    event.listen(liveness_engine(db_url), "before_cursor_execute", seen)
    sql.reset()
    try:
        beat.report()
    finally:
        event.remove(liveness_engine(db_url), "before_cursor_execute", seen)
    # In autocommit on its own engine (models.db.liveness_write: on SQLite the liveness
    # file's, where the table is in "main"): no BEGIN IMMEDIATE, nothing on the writers'.
    assert liveness == ["UPDATE MAIN.SERVICE_LIVENESS"]
    assert (sql.statements, sql.commits) == ([], 0)
    assert _reports(db_url, service_id) == 3


def test_an_open_reader_does_not_hold_up_a_heartbeat(db_url: str) -> None:
    service_id = _service(db_url)
    beat = Heartbeat(None, db_url, service_id, 10.0)
    with session_scope(db_url, read_only=True) as reader:
        before = reader.scalars(select(Service.report_count)).one()
        reported = threading.Thread(target=beat.report)
        reported.start()
        # The reader is still open: with a write lock it would hold the heartbeat for
        # busy_timeout (30 s).
        reported.join(timeout=10)
        assert not reported.is_alive()
        assert reader.scalars(select(Service.report_count)).one() == before  # its snapshot
    assert _reports(db_url, service_id) == before + 1
