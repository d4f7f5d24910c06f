"""``retry_on_conflict`` (tenacity): each attempt is its own transaction; a generation
conflict or a database conflict is tried again, anything else is raised at once, and the
last conflict is raised when the attempts are spent."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from compute.claims import retry_on_conflict
from compute.sessions import sessions_for
from models import Flavor
from models.db import session_scope
from novaq.exceptions import GenerationConflict


def _flavors(db_url: str) -> int:
    with session_scope(db_url) as session:
        return int(session.scalar(select(func.count()).select_from(Flavor)) or 0)


def _add_flavor(session: Session, name: str) -> None:
    session.add(
        Flavor(flavorid=name, name=name, vcpus=1, memory_mb=1, root_gb=0, ephemeral_gb=0, swap=0)
    )
    session.flush()


def test_a_conflict_is_tried_again_in_a_new_transaction(db_url: str) -> None:
    calls: list[int] = []

    def work(session: Session) -> str:
        calls.append(1)
        _add_flavor(session, f"f{len(calls)}")
        if len(calls) < 3:
            raise GenerationConflict(node="n1", generation=len(calls))
        return "done"

    assert retry_on_conflict(sessions_for(db_url), work) == "done"
    assert len(calls) == 3
    assert _flavors(db_url) == 1  # the failed attempts' writes were rolled back


def test_other_errors_are_not_retried(db_url: str) -> None:
    calls: list[int] = []

    def work(session: Session) -> None:
        calls.append(1)
        raise ValueError("not a conflict")

    with pytest.raises(ValueError, match="not a conflict"):
        retry_on_conflict(sessions_for(db_url), work)
    assert len(calls) == 1


def test_the_last_conflict_is_raised_when_the_attempts_are_spent(db_url: str) -> None:
    calls: list[int] = []

    def work(session: Session) -> None:
        calls.append(1)
        raise GenerationConflict(node="n1", generation=len(calls))

    with pytest.raises(GenerationConflict, match="generation 4"):
        retry_on_conflict(sessions_for(db_url), work, attempts=4)
    assert len(calls) == 4
