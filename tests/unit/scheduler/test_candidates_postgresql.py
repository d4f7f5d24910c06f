"""The candidate load and a decision on PostgreSQL, side by side with SQLite: the unit
tier's other scheduler tests run on SQLite only, and PostgreSQL's candidate query is its
own (``least()`` capacity check, the instance counts in one LATERAL subquery).

Skipped when no PostgreSQL listens on 127.0.0.1:5432."""

from __future__ import annotations

import uuid as uuid_module
from typing import Any

import pytest
from sqlalchemy import event, insert, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import QueuePool

from compute import instance_state
from compute.claims import ResourceRequest
from compute.fresh_claim import USAGE_COLUMNS, write_fresh_claim
from compute.servicegroup import COMPUTE
from compute.sessions import sessions_for
from compute.states import TaskState, VmState
from compute.stats import IO_TASK_STATES
from models import ComputeNode, Flavor, Instance, Service, utcnow
from models.db import get_engine, session_scope
from models.pg_connection import ReaderCommitsConnection
from novaq.settings import Settings
from scheduler.candidate_sql import AGGREGATED, PCI_FREE, candidates_query
from scheduler.candidates import load_candidates
from scheduler.manager import Scheduler
from tests.costs import listening
from tests.factories import flavor_dict, spec_for, statements_run

#: (vm_state, task_state, deleted) of the instances put on each host, in turn: live and
#: deleted, building, in-flight I/O and idle, so both counts differ from host to host.
_INSTANCE_KINDS = [
    (VmState.ACTIVE, None, 0),
    (VmState.BUILDING, TaskState.SCHEDULING, 0),
    (VmState.ACTIVE, IO_TASK_STATES[0], 0),
    (VmState.ACTIVE, IO_TASK_STATES[-1], 0),
    (VmState.ACTIVE, TaskState.REBOOTING, 0),
    (VmState.BUILDING, None, 1),  # deleted: counted nowhere
    (VmState.STOPPED, None, 0),
]


@pytest.fixture
def pg_db(migrated_pg_url: str) -> str:
    return migrated_pg_url


@pytest.fixture
def sqlite_db(migrated_sqlite_url: str) -> str:
    return migrated_sqlite_url


def _populate(url: str, hosts: int) -> dict[str, tuple[int, int]]:
    """``hosts`` up, enabled hosts, host ``i`` with ``i % 9`` instances of the kinds
    above; returns each host's expected (num_instances, num_io_ops)."""
    now = utcnow()
    names = [f"pg{i:04d}" for i in range(hosts)]
    services = [dict(host=n, binary=COMPUTE, topic=f"compute.{n}", created_at=now) for n in names]
    nodes = [
        dict(
            uuid=str(uuid_module.UUID(int=i + 1)),
            host=n,
            hypervisor_hostname=n,
            hypervisor_type="QEMU",
            cpu_info='{"arch": "x86_64"}',
            vcpus=16,
            memory_mb=32768,
            local_gb=500,
            memory_mb_used=512,
            reserved_memory_mb=512,
        )
        for i, n in enumerate(names)
    ]
    instances: list[dict[str, Any]] = []
    expected = {}
    for i, host in enumerate(names):
        live = io_ops = 0
        for k in range(i % 9):
            vm_state, task_state, deleted = _INSTANCE_KINDS[k % len(_INSTANCE_KINDS)]
            row_id = len(instances) + 1
            instances.append(
                dict(
                    uuid=str(uuid_module.UUID(int=10**6 + row_id)),
                    display_name=f"i{row_id}",
                    flavor_id=1,
                    flavor=flavor_dict(),
                    image_ref="cirros",
                    vm_state=vm_state,
                    task_state=task_state,
                    host=host,
                    node=host,
                    deleted=row_id if deleted else 0,
                    request_spec={},
                    system_metadata={},
                )
            )
            if not deleted:
                live += 1
                io_ops += vm_state == VmState.BUILDING or task_state in IO_TASK_STATES
        expected[host] = (live, io_ops)
    with session_scope(url) as session:
        if session.get(Flavor, 1) is None:  # the instances' flavor_id
            session.add(Flavor(id=1, flavorid="t", name="tiny", vcpus=1, memory_mb=512, root_gb=1))
            session.flush()
        session.execute(insert(Service), services)
        session.execute(insert(ComputeNode), nodes)
        if instances:
            session.execute(insert(Instance), instances)
    return expected


def _counts(url: str, request: ResourceRequest | None) -> dict[str, tuple[int, int]]:
    with session_scope(url, read_only=True) as session:
        hosts = load_candidates(session, Settings(database_url=url), request).hosts
    return {h.host: (h.num_instances, h.num_io_ops) for h in hosts}


def test_instance_counts_on_postgresql_are_sqlites_and_pythons(pg_db: str, sqlite_db: str) -> None:
    expected = _populate(pg_db, 40)
    assert _populate(sqlite_db, 40) == expected
    assert any(io for _, io in expected.values()) and any(n for n, _ in expected.values())
    request = ResourceRequest(vcpus=1, memory_mb=512, disk_gb=1)
    for asked in (None, request):
        assert _counts(pg_db, asked) == _counts(sqlite_db, asked) == expected


def _scheduling(instance_uuid: str, task_state: str = TaskState.SCHEDULING) -> Instance:
    """A server's row as the API leaves it for the scheduler (or ``task_state``)."""
    return Instance(
        uuid=instance_uuid,
        display_name="d",
        flavor_id=1,
        flavor=flavor_dict(),
        image_ref="cirros",
        vm_state=VmState.BUILDING,
        task_state=task_state,
        request_spec={},
        system_metadata={},
    )


def _decision(url: str, scheduler: Scheduler) -> list[str]:
    instance_uuid = str(uuid_module.uuid4())
    with session_scope(url) as session:
        session.add(_scheduling(instance_uuid))
    spec = spec_for(instance_uuid)
    with statements_run(url) as statements:
        assert scheduler.select_and_claim(sessions_for(url), spec) is not None
    return statements


def test_a_decision_on_postgresql_issues_three_statements_at_any_size(pg_db: str) -> None:
    scheduler = Scheduler(Settings(database_url=pg_db))
    _populate(pg_db, 10)
    at_10 = _decision(pg_db, scheduler)
    with session_scope(pg_db) as session:
        session.execute(text("DELETE FROM instances"))
        session.execute(text("DELETE FROM allocations"))
        session.execute(text("DELETE FROM compute_nodes"))
        session.execute(text("DELETE FROM services"))
    _populate(pg_db, 200)
    at_200 = _decision(pg_db, scheduler)
    # The candidates with the instance's placement; the claim's read; its INSERT and
    # compare-and-swap with the instance's host, in one statement (compute.fresh_claim).
    kinds = ["SELECT", "SELECT", "WITH"]
    assert [s.split()[0] for s in at_10] == [s.split()[0] for s in at_200] == kinds


def test_a_decisions_statements_stay_prepared_on_postgresql(pg_db: str) -> None:
    """A reader's transaction ends with COMMIT on the server (``models.pg_connection``):
    psycopg keeps what it prepared (a ROLLBACK would make it DEALLOCATE ALL, one more
    round trip), so from their fifth run a decision's statements are planned no more."""
    scheduler = Scheduler(Settings(database_url=pg_db))
    _populate(pg_db, 5)
    for _ in range(8):  # past psycopg's threshold (5 runs on a connection)
        _decision(pg_db, scheduler)
    pool = get_engine(pg_db).pool
    assert isinstance(pool, QueuePool)
    prepared = 0
    for _ in range(pool.checkedin()):  # every pooled connection, not just one
        with get_engine(pg_db).connect() as conn:
            statements = conn.execute(text("SELECT statement FROM pg_prepared_statements"))
            prepared += sum("FROM compute_nodes" in s for s in statements.scalars())
    assert prepared >= 1


def test_a_reader_ends_with_commit_on_the_server_and_a_rollback_for_sqlalchemy(
    pg_db: str,
) -> None:
    ends: list[str] = []
    engine = get_engine(pg_db)
    event.listen(engine, "rollback", lambda _conn: ends.append("rollback"))
    event.listen(engine, "commit", lambda _conn: ends.append("commit"))
    with session_scope(pg_db, read_only=True) as session:
        session.execute(text("SELECT 1"))
        driver = session.connection().connection.driver_connection
        assert isinstance(driver, ReaderCommitsConnection)
        xid = session.execute(text("SELECT txid_current_if_assigned()")).scalar_one()
        assert xid is None  # a read-only transaction: nothing to commit
    assert ends == ["rollback"]
    # A failed reader rolls back (psycopg then drops what it prepared, as before).
    with pytest.raises(DBAPIError), session_scope(pg_db, read_only=True) as session:
        session.execute(text("SELECT 1/0"))
    with session_scope(pg_db) as session:  # the connection is a writer's again
        session.execute(text("UPDATE compute_nodes SET generation = generation"))
    assert ends[-1] == "commit"


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_db" if request.param == "sqlite" else "pg_db"))


def test_the_candidate_columns_end_where_the_placement_columns_begin() -> None:
    query = candidates_query(False, True, "postgresql", placement=True)
    assert len(query.selected_columns) == AGGREGATED + 1 + 3
    assert PCI_FREE == AGGREGATED - 1


def test_an_instance_without_a_row_is_not_placed_with_or_without_candidates(any_db: str) -> None:
    scheduler = Scheduler(Settings(database_url=any_db))
    missing = str(uuid_module.uuid4())  # a boot the API took back: no row
    assert scheduler.select_and_claim(sessions_for(any_db), spec_for(missing)) is None
    _populate(any_db, 3)
    with statements_run(any_db) as statements:
        assert scheduler.select_and_claim(sessions_for(any_db), spec_for(missing)) is None
    assert not [s for s in statements if s.split()[0] in ("INSERT", "UPDATE")]
    with session_scope(any_db) as session:
        assert session.execute(text("SELECT count(*) FROM allocations")).scalar_one() == 0


def test_a_redelivered_decision_keeps_its_placement(any_db: str) -> None:
    scheduler = Scheduler(Settings(database_url=any_db))
    _populate(any_db, 4)
    with session_scope(any_db) as session:
        session.execute(text("DELETE FROM instances"))
    _decision(any_db, scheduler)
    with session_scope(any_db) as session:
        (instance_uuid,) = session.execute(text("SELECT uuid FROM instances")).scalars()
    first = scheduler.select_and_claim(sessions_for(any_db), spec_for(instance_uuid))
    again = scheduler.select_and_claim(sessions_for(any_db), spec_for(instance_uuid))
    assert first is not None and again is not None
    assert (again.host, again.compute_node_id) == (first.host, first.compute_node_id)
    with session_scope(any_db) as session:
        assert session.execute(text("SELECT count(*) FROM allocations")).scalar_one() == 3


def _allocations_and_generations(url: str) -> tuple[int, int]:
    with session_scope(url) as session:
        allocations = session.execute(text("SELECT count(*) FROM allocations")).scalar_one()
        generations = session.execute(text("SELECT sum(generation) FROM compute_nodes"))
        return int(allocations), int(generations.scalar_one() or 0)


def test_a_server_that_left_scheduling_is_not_placed_and_nothing_is_claimed(any_db: str) -> None:
    scheduler = Scheduler(Settings(database_url=any_db))
    _populate(any_db, 3)
    with session_scope(any_db) as session:
        session.execute(text("DELETE FROM instances"))
    _decision(any_db, scheduler)  # one placed instance: the generations moved
    before = _allocations_and_generations(any_db)
    deleting = str(uuid_module.uuid4())
    with session_scope(any_db) as session:
        session.add(_scheduling(deleting, TaskState.DELETING))
    assert scheduler.select_and_claim(sessions_for(any_db), spec_for(deleting)) is None
    assert _allocations_and_generations(any_db) == before  # the claim rolled back whole
    with session_scope(any_db) as session:
        host = session.execute(text(f"SELECT host FROM instances WHERE uuid = '{deleting}'"))
        assert host.scalar_one() is None


def test_a_claim_that_loses_the_generation_race_is_tried_again(
    pg_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL only: on SQLite the claim's writer holds the write lock from its BEGIN,
    so no other claim commits between its read and its compare-and-swap."""
    from compute import claims

    any_db = pg_db
    scheduler = Scheduler(Settings(database_url=any_db))
    _populate(any_db, 1)
    read = claims._claim_view
    raced: list[int] = []

    def racing(session: Any, consumer_uuid: str, node_id: int) -> Any:
        view = read(session, consumer_uuid, node_id)
        if not raced:  # another claim commits on the node after this one read it
            raced.append(node_id)
            with session_scope(any_db) as other:
                other.execute(
                    text(
                        f"UPDATE compute_nodes SET generation = generation + 1 WHERE id = {node_id}"
                    )
                )
        return view

    monkeypatch.setattr(claims, "_claim_view", racing)
    ends: list[str] = []
    with (
        statements_run(any_db) as statements,
        listening(any_db, [(end, lambda _conn, end=end: ends.append(end)) for end in _ENDS]),
    ):
        _decision(any_db, scheduler)
    assert raced and [s.split()[0] for s in statements].count("WITH") == 2  # lost, then won
    # Claimed again in the decision's one transaction: no rollback, which would have made
    # psycopg drop what it prepared on the connection. (The commits: the server's row, the
    # race's bump, the decision.)
    assert ends == ["commit"] * 3
    allocations, generation = _allocations_and_generations(any_db)
    assert (allocations, generation) == (3, 2)  # the race's bump and the winning claim's


_ENDS = ("commit", "rollback")


def test_a_fresh_claim_that_lost_the_generation_race_wrote_nothing(pg_db: str) -> None:
    """``compute.fresh_claim``: the INSERT and the placing hang on the compare-and-swap,
    so a claim made on a generation that moved writes no allocation and places nothing
    (its transaction may claim again)."""
    _populate(pg_db, 1)
    instance_uuid = str(uuid_module.uuid4())
    with session_scope(pg_db) as session:
        session.execute(text("DELETE FROM instances"))
        session.add(_scheduling(instance_uuid))
    placing = instance_state.placing(
        instance_uuid, TaskState.SCHEDULING, VmState.BUILDING, "pg0000", "pg0000"
    )
    with session_scope(pg_db) as session:
        node_id, generation = session.execute(
            text("SELECT id, generation FROM compute_nodes")
        ).one()
        usage = {f"b_{name}": 1 for name in USAGE_COLUMNS}
        amounts = [("VCPU", 1), ("MEMORY_MB", 512)]
        lost = write_fresh_claim(session, node_id, "c", amounts, generation + 1, usage, placing)
        won = write_fresh_claim(session, node_id, "c", amounts, generation, usage, placing)
    assert (lost, won) == ((0, 0), (1, 1))
    allocations, generation_after = _allocations_and_generations(pg_db)
    assert (allocations, generation_after) == (2, generation + 1)  # the winning claim's alone


def test_a_host_taken_meanwhile_sends_the_claim_to_the_next_host(
    pg_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's one-transaction decision (``Scheduler._schedule_in_one``): another
    claim fills the best host after this decision read it; the claim there fails, the
    transaction rolls back whole, and ``claim_first`` places the server on the next."""
    from compute import claims

    scheduler = Scheduler(Settings(database_url=pg_db))
    _populate(pg_db, 2)
    read = claims._claim_view
    raced: list[int] = []

    def racing(session: Any, consumer_uuid: str, node_id: int) -> Any:
        view = read(session, consumer_uuid, node_id)
        if not raced:
            raced.append(node_id)
            with session_scope(pg_db) as other:
                other.execute(
                    text(
                        "INSERT INTO allocations (compute_node_id, consumer_uuid, resource_class,"
                        f" used, created_at) VALUES ({node_id}, 'other', 'VCPU', 100000, now())"
                    )
                )
                other.execute(
                    text(
                        f"UPDATE compute_nodes SET generation = generation + 1 WHERE id = {node_id}"
                    )
                )
        return view

    monkeypatch.setattr(claims, "_claim_view", racing)
    with session_scope(pg_db) as session:
        session.execute(text("DELETE FROM instances"))
    _decision(pg_db, scheduler)
    with session_scope(pg_db) as session:
        (node,) = session.execute(text("SELECT node FROM instances")).scalars()
        chosen = session.execute(
            text(f"SELECT id FROM compute_nodes WHERE hypervisor_hostname = '{node}'")
        ).scalar_one()
        mine = session.execute(
            text("SELECT count(*) FROM allocations WHERE consumer_uuid != 'other'")
        ).scalar_one()
    assert raced and chosen != raced[0] and mine == 3
