"""Every transaction on one database uses one session factory (issue 16: a sessionmaker
per transaction built a Session subclass each time, about a millisecond of CPU)."""

from __future__ import annotations

from models.db import dispose_all, get_engine, get_sessionmaker, session_scope


def test_transactions_share_one_session_class(migrated_url: str) -> None:
    classes = set()
    for _ in range(3):
        with session_scope(migrated_url) as session:
            classes.add(type(session))
    assert len(classes) == 1
    assert get_sessionmaker(migrated_url) is get_sessionmaker(migrated_url)


def test_a_new_engine_gets_a_new_session_factory(migrated_url: str) -> None:
    before = get_sessionmaker(migrated_url)
    dispose_all()
    after = get_sessionmaker(migrated_url)
    assert after is not before
    assert after.kw["bind"] is get_engine(migrated_url)
