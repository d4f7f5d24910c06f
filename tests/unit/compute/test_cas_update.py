"""The compare-and-swap of an instance (``compute.instance_state.cas_update``): what it
writes and raises, from statements built once per shape, and an expression's value
through the statement built for the call."""

from __future__ import annotations

import pytest
from sqlalchemy import func

from compute.instance_state import _cas_statement, cas_update, get_instance
from models.db import session_scope
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from tests.factories import make_instance


def test_it_writes_the_values_and_updated_at_when_the_task_state_is_expected(
    db_url: str,
) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    with session_scope(db_url) as session:
        before = get_instance(session, uuid).updated_at
        cas_update(session, uuid, expected_task_state=("scheduling", None), task_state="spawning")
        cas_update(
            session, uuid, expected_task_state=["spawning"], task_state=None, vm_state="active"
        )
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state) == ("active", None)
        assert instance.updated_at is not None and instance.updated_at != before


def test_a_shape_is_built_once(db_url: str) -> None:
    keys = ("task_state", "updated_at", "vm_state")
    first = _cas_statement(("spawning",), None, keys, False)
    assert first is not None
    assert _cas_statement(("spawning",), None, keys, False) is first


def test_an_expected_vm_state_is_checked(db_url: str) -> None:
    uuid = make_instance(db_url, host="host1", node="host1", vm_state="active", task_state=None)
    with pytest.raises(UnexpectedTaskStateError) as raised, session_scope(db_url) as session:
        cas_update(
            session,
            uuid,
            expected_task_state=[None],
            expected_vm_state=["stopped"],
            task_state="powering-off",
        )
    assert "vm_state in ['stopped'] and task_state in [None]" in str(raised.value)
    with session_scope(db_url) as session:
        cas_update(
            session,
            uuid,
            expected_task_state=[None],
            expected_vm_state=["active"],
            task_state="powering-off",
        )
        assert get_instance(session, uuid).task_state == "powering-off"


def test_an_expression_value_is_written_by_a_statement_of_its_own(db_url: str) -> None:
    uuid = make_instance(db_url, host="host1", node="host1", task_state=None)
    with session_scope(db_url) as session:
        cas_update(session, uuid, expected_task_state=[None], display_name=func.upper("vm"))
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).display_name == "VM"


def test_pending_orm_writes_land_before_the_update(db_url: str) -> None:
    uuid = make_instance(db_url, host="host1", node="host1", task_state=None)
    with session_scope(db_url) as session:
        get_instance(session, uuid).task_state = "spawning"
        cas_update(session, uuid, expected_task_state=["spawning"], task_state=None)
    with session_scope(db_url) as session:
        assert get_instance(session, uuid).task_state is None


@pytest.mark.parametrize("deleted", [False, True])
def test_it_says_why_nothing_matched(db_url: str, deleted: bool) -> None:
    uuid = make_instance(db_url, host="host1", node="host1", task_state=None)
    if deleted:
        with session_scope(db_url) as session:
            get_instance(session, uuid).deleted = 1
    with pytest.raises(UnexpectedTaskStateError) as raised, session_scope(db_url) as session:
        cas_update(session, uuid, expected_task_state=("spawning",), task_state=None)
    assert "task_state in ['spawning']" in str(raised.value)
    assert ("(deleted)" in str(raised.value)) is deleted


def test_a_missing_instance_is_not_found(db_url: str) -> None:
    with pytest.raises(InstanceNotFound), session_scope(db_url) as session:
        cas_update(session, "no-such-uuid", expected_task_state=(None,), task_state="spawning")
