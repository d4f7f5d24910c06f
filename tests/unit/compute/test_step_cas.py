"""The step runner's compare-and-swap (``compute.step_cas``): what ``cas_update`` writes
and raises, from statements built once per shape."""

from __future__ import annotations

import pytest

from compute.instance_state import cas_update, get_instance
from compute.step_cas import _statement, step_cas
from models.db import session_scope
from novaq.exceptions import InstanceNotFound, UnexpectedTaskStateError
from tests.factories import make_instance


def test_it_writes_the_values_and_updated_at_when_the_task_state_is_expected(
    db_url: str,
) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    with session_scope(db_url) as session:
        before = get_instance(session, uuid).updated_at
        step_cas(session, uuid, ("scheduling", None), {"task_state": "spawning"})
        step_cas(session, uuid, ("spawning",), {"task_state": None, "vm_state": "active"})
    with session_scope(db_url) as session:
        instance = get_instance(session, uuid)
        assert (instance.vm_state, instance.task_state) == ("active", None)
        assert instance.updated_at is not None and instance.updated_at != before


def test_a_shape_is_built_once(db_url: str) -> None:
    first = _statement(("spawning",), ("task_state", "updated_at", "vm_state"))
    assert _statement(("spawning",), ("task_state", "updated_at", "vm_state")) is first


@pytest.mark.parametrize("deleted", [False, True])
def test_it_raises_what_cas_update_raises(db_url: str, deleted: bool) -> None:
    uuid = make_instance(db_url, host="host1", node="host1")
    if deleted:
        with session_scope(db_url) as session:
            get_instance(session, uuid).deleted = 1
    errors = []
    for cas in (
        lambda session: step_cas(session, uuid, ("spawning",), {"task_state": None}),
        lambda session: cas_update(
            session, uuid, expected_task_state=("spawning",), task_state=None
        ),
    ):
        with pytest.raises(UnexpectedTaskStateError) as raised, session_scope(db_url) as session:
            cas(session)
        errors.append(str(raised.value))
    assert errors[0] == errors[1]


def test_a_missing_instance_is_not_found(db_url: str) -> None:
    with pytest.raises(InstanceNotFound), session_scope(db_url) as session:
        step_cas(session, "no-such-uuid", (None,), {"task_state": "spawning"})
