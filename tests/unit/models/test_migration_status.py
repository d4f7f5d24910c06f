"""Every write of ``migrations.status`` goes through the transition table: each legal
transition is accepted, each illegal one refused with the row unchanged, on the attribute
path (the validator) and on the bulk path (``status_update`` and the session hook)."""

from __future__ import annotations

import itertools
import uuid as uuid_module

import pytest
from sqlalchemy import select, text, update

from models import Migration
from models.db import session_scope
from models.migration import status_update
from models.states import (
    INITIAL_MIGRATION_STATUSES,
    MIGRATION_TRANSITIONS,
    MigrationStatus,
    check_migration_transition,
)
from novaq.exceptions import InvalidMigrationTransition
from tests.factories import make_instance, migration_path

S = MigrationStatus
LEGAL = sorted((a, b) for a, targets in MIGRATION_TRANSITIONS.items() for b in targets)
ILLEGAL = sorted(
    (a, b)
    for a, b in itertools.product(MigrationStatus, repeat=2)
    if a != b and b not in MIGRATION_TRANSITIONS[a]
)


def _path_to(status: MigrationStatus) -> list[MigrationStatus]:
    """A creation status and the legal walk from it to ``status``."""
    for start in sorted(INITIAL_MIGRATION_STATUSES):
        try:
            return [start, *migration_path(start, status)]
        except ValueError:
            continue
    raise AssertionError(f"{status} is unreachable")


def _row_in(db_url: str, status: MigrationStatus) -> str:
    instance_uuid = make_instance(db_url)
    first, *rest = _path_to(status)
    uuid = str(uuid_module.uuid4())
    with session_scope(db_url) as session:
        migration = Migration(
            uuid=uuid, instance_uuid=instance_uuid, migration_type="resize", status=first
        )
        for step in rest:
            migration.status = step
        session.add(migration)
    return uuid


def _stored(db_url: str, uuid: str) -> str:
    with session_scope(db_url) as session:
        return str(
            session.execute(
                text("SELECT status FROM migrations WHERE uuid = :u"), {"u": uuid}
            ).scalar_one()
        )


def test_the_table_names_every_status_and_every_status_is_reachable() -> None:
    assert set(MIGRATION_TRANSITIONS) == set(MigrationStatus)
    for status in MigrationStatus:
        assert _path_to(status)[-1] == status


def test_the_resize_flow_nova_writes_is_legal() -> None:
    flow = [S.PRE_MIGRATING, S.MIGRATING, S.POST_MIGRATING, S.FINISHED]
    for current, wanted in itertools.pairwise(flow):
        assert check_migration_transition(current, wanted) == wanted
    for end in ((S.CONFIRMING, S.CONFIRMED), (S.REVERTING, S.REVERTED)):
        assert check_migration_transition(S.FINISHED, end[0]) == end[0]
        assert check_migration_transition(end[0], end[1]) == end[1]
    assert check_migration_transition(S.ERROR, S.FAILED) == S.FAILED


@pytest.mark.parametrize(("current", "wanted"), ILLEGAL)
def test_an_illegal_transition_is_refused(current: S, wanted: S) -> None:
    with pytest.raises(InvalidMigrationTransition, match=f"from {current} to {wanted}"):
        check_migration_transition(current, wanted, "m-1")


def test_rewriting_the_current_status_is_allowed_and_unknown_statuses_are_not() -> None:
    for status in MigrationStatus:
        assert check_migration_transition(status, status) == status
    with pytest.raises(InvalidMigrationTransition):
        check_migration_transition(S.FINISHED, "finishd")


def test_a_row_is_created_only_in_an_initial_status() -> None:
    for status in INITIAL_MIGRATION_STATUSES:
        assert Migration(status=status).status == status
    with pytest.raises(InvalidMigrationTransition):
        Migration(status=S.FINISHED)


@pytest.mark.parametrize(("current", "wanted"), LEGAL)
def test_every_legal_transition_is_stored(db_url: str, current: S, wanted: S) -> None:
    uuid = _row_in(db_url, current)
    with session_scope(db_url) as session:
        migration = session.scalars(select(Migration).where(Migration.uuid == uuid)).one()
        migration.status = wanted
    assert _stored(db_url, uuid) == wanted


@pytest.mark.parametrize(("current", "wanted"), ILLEGAL)
def test_every_illegal_transition_leaves_the_row_unchanged(
    db_url: str, current: S, wanted: S
) -> None:
    uuid = _row_in(db_url, current)
    with pytest.raises(InvalidMigrationTransition), session_scope(db_url) as session:
        migration = session.scalars(select(Migration).where(Migration.uuid == uuid)).one()
        migration.status = wanted
    assert _stored(db_url, uuid) == current


@pytest.mark.parametrize(("current", "wanted"), LEGAL)
def test_a_legal_bulk_update_is_stored(db_url: str, current: S, wanted: S) -> None:
    uuid = _row_in(db_url, current)
    with session_scope(db_url) as session:
        assert session.execute(status_update(uuid, current, wanted)).rowcount == 1  # type: ignore[attr-defined]
    assert _stored(db_url, uuid) == wanted


def test_a_bulk_update_is_a_compare_and_swap(db_url: str) -> None:
    uuid = _row_in(db_url, S.CONFIRMED)
    with session_scope(db_url) as session:
        moved = session.execute(status_update(uuid, S.FINISHED, S.ERROR)).rowcount  # type: ignore[attr-defined]
    assert moved == 0
    assert _stored(db_url, uuid) == S.CONFIRMED


def test_an_illegal_bulk_update_is_refused_before_the_table(db_url: str) -> None:
    uuid = _row_in(db_url, S.CONFIRMED)
    with pytest.raises(InvalidMigrationTransition):
        status_update(uuid, S.CONFIRMED, S.MIGRATING)
    assert _stored(db_url, uuid) == S.CONFIRMED


@pytest.mark.parametrize("form", ["values", "executemany"])
def test_a_bulk_update_of_status_that_bypasses_the_check_is_refused(db_url: str, form: str) -> None:
    uuid = _row_in(db_url, S.CONFIRMED)
    with pytest.raises(InvalidMigrationTransition), session_scope(db_url) as session:
        if form == "values":
            session.execute(update(Migration).where(Migration.uuid == uuid).values(status="error"))
        else:
            row_id = session.scalars(select(Migration.id).where(Migration.uuid == uuid)).one()
            session.execute(update(Migration), [{"id": row_id, "status": "error"}])
    assert _stored(db_url, uuid) == S.CONFIRMED


def test_a_bulk_update_of_other_columns_is_not_checked(db_url: str) -> None:
    uuid = _row_in(db_url, S.FINISHED)
    with session_scope(db_url) as session:
        session.execute(update(Migration).where(Migration.uuid == uuid).values(dest_node="n2"))
        migration = session.scalars(select(Migration).where(Migration.uuid == uuid)).one()
        assert migration.dest_node == "n2"
    assert _stored(db_url, uuid) == S.FINISHED
