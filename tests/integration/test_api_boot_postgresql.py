"""``api.boot`` on real PostgreSQL (issue 16, goal 4): the lookups share the write's one
transaction (``models.read_then_write``), and that changes nothing of its durability:
the servers, their actions and their records in flight commit together before the
publish; a boot refused, or whose write fails, writes nothing and publishes nothing; a
publish that fails for good takes the write back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, func, select

from models import Instance, InstanceAction, OperationInFlight
from models.db import get_engine, session_scope
from models.server_group import ServerGroupMember
from novaq import fault_points
from novaq.exceptions import InvalidInput, ServiceUnavailable
from tests.costs import Sql, counting_sql
from workflows import api, dispatch

pytestmark = pytest.mark.integration

FLAVOR = "pg-boot"


#: The workflows published (their first task's name), kept off the broker: a scheduler
#: the tier's cluster tests left running would take them and act on these servers.
_PUBLISHED: list[str] = []


def _capture(signature: Any) -> None:
    _PUBLISHED.append(dispatch.first_task(signature))


def _rows(url: str) -> tuple[int, int, int]:
    with session_scope(url) as session:
        return tuple(  # type: ignore[return-value]
            int(session.scalar(select(func.count()).select_from(m)) or 0)
            for m in (Instance, InstanceAction, OperationInFlight)
        )


@pytest.fixture
def booting(services: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    # The publish itself is dispatch's (its retries, its pooled producer); what is tested
    # here is what is written before it, and that nothing is sent for a boot refused.
    monkeypatch.setattr(dispatch, "_publish_once", _capture)
    with session_scope(services) as session:
        others = set(session.scalars(select(Instance.uuid)))
    api.create_flavor(FLAVOR, 1, 512, 1)
    api.boot("warm", FLAVOR, "cirros")
    _PUBLISHED.clear()
    yield services
    _PUBLISHED.clear()
    # This module's servers only: the tier's database is shared by its other tests.
    with session_scope(services) as session:
        ours = set(session.scalars(select(Instance.uuid))) - others
        session.execute(delete(OperationInFlight).where(OperationInFlight.instance_uuid.in_(ours)))
        session.execute(delete(InstanceAction).where(InstanceAction.instance_uuid.in_(ours)))
        session.execute(delete(Instance).where(Instance.uuid.in_(ours)))
    api.delete_flavor(FLAVOR)


@pytest.fixture
def counts(booting: str) -> Iterator[Sql]:
    with counting_sql(booting) as seen:
        yield seen


@pytest.fixture
def checkouts(booting: str) -> Iterator[list[Any]]:
    """The pooled connections checked out (each one pinged first, ``pool_pre_ping``)."""
    from sqlalchemy import event

    seen: list[Any] = []

    def checkout(*args: Any) -> None:
        seen.append(args)

    engine = get_engine(booting)
    event.listen(engine, "checkout", checkout)
    yield seen
    event.remove(engine, "checkout", checkout)


def test_a_boot_is_one_transaction_of_five_statements(
    booting: str, counts: Sql, checkouts: list[Any]
) -> None:
    before = _rows(booting)
    counts.reset()
    checkouts.clear()
    [uuid] = api.boot("vm", FLAVOR, "cirros")
    # The lookups and the write in one transaction on one connection: was a read-only
    # transaction, then the write's (2 checkouts, 2 pings, BEGIN/ROLLBACK more).
    assert (counts.commits, counts.rollbacks, len(checkouts)) == (1, 0, 1)
    assert counts.statements == [
        "SELECT FLAVORS.ID,",
        "SELECT IMAGES.ID,",
        "INSERT INTO",
        "INSERT INTO",
        "INSERT INTO",
    ]
    assert _rows(booting) == tuple(n + 1 for n in before)
    with session_scope(booting) as session:
        record = session.get(OperationInFlight, uuid)
        assert record is not None and record.task_state == "scheduling"
    assert _PUBLISHED == ["scheduler.select_destinations"]


def test_a_refused_boot_writes_and_publishes_nothing(booting: str, counts: Sql) -> None:
    before = _rows(booting)
    counts.reset()
    with pytest.raises(InvalidInput):
        api.boot("vm", FLAVOR, "cirros", availability_zone="nowhere")
    assert counts.commits == 0 and counts.rollbacks == 1
    assert _rows(booting) == before and _PUBLISHED == []


def test_a_write_that_fails_rolls_back_the_servers_and_publishes_nothing(
    booting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _rows(booting)

    def record_fails(*_: Any, **__: Any) -> Any:
        raise RuntimeError("the record in flight could not be written")

    # After the servers and actions were added to the transaction.
    monkeypatch.setattr(dispatch, "record", record_fails)
    with pytest.raises(RuntimeError):
        api.boot("vm", FLAVOR, "cirros")
    assert _rows(booting) == before and _PUBLISHED == []


def test_a_publish_that_fails_for_good_takes_the_boot_back(
    booting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _rows(booting)
    monkeypatch.setenv(fault_points.ENV, str(tmp_path))
    fault_points.arm_raise(tmp_path, "publish:scheduler.select_destinations")
    with pytest.raises(ServiceUnavailable):
        api.boot("vm", FLAVOR, "cirros")
    assert _rows(booting) == before and _PUBLISHED == []


def test_a_multi_create_in_a_group_is_still_one_transaction(booting: str, counts: Sql) -> None:
    # The group is looked up and its memberships written in the one transaction.
    group = api.create_server_group("pg-boot-group", "anti-affinity")
    counts.reset()
    uuids = api.boot("web", FLAVOR, "cirros", count=3, group="pg-boot-group")
    assert (counts.commits, counts.rollbacks) == (1, 0)
    assert sorted(api.show_server_group(group["id"])["members"]) == sorted(uuids)
    with session_scope(booting) as session:
        recorded = session.scalars(
            select(OperationInFlight.instance_uuid).where(
                OperationInFlight.instance_uuid.in_(uuids)
            )
        )
        assert sorted(recorded) == sorted(uuids)
    assert _PUBLISHED == ["scheduler.select_destinations"]  # one workflow places the three
    with session_scope(booting) as session:
        session.execute(delete(ServerGroupMember).where(ServerGroupMember.instance_uuid.in_(uuids)))
    api.delete_server_group(group["id"])
