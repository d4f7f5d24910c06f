"""The scheduler's two reads of a decision touch no table row for their per-host and
per-node figures: the candidate query's instance counts read only
``ix_instances_host_deleted_vm_state_task_state``, the claim's usage read of the node only
``ix_allocations_compute_node_usage`` (SQLite's query plans; migration 0019)."""

from __future__ import annotations

from compute.sessions import sessions_for
from models.db import get_engine
from scheduler.manager import Scheduler
from tests.factories import gpu_settings, make_instance, spec_for, statements_run
from tests.unit.scheduler.test_candidates import _add_hosts


def _plan(db_url: str, statement: str) -> list[str]:
    params = [None] * statement.count("?")
    with get_engine(db_url).connect() as conn:
        rows = conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, tuple(params)).all()
    return [row[3] for row in rows]


def test_the_decisions_reads_use_only_the_covering_indexes(db_url: str) -> None:
    scheduler = Scheduler(gpu_settings())
    _add_hosts(db_url, 0, 3)
    for _ in range(3):  # some instances and allocations on the hosts
        uuid = make_instance(db_url)
        assert scheduler.select_and_claim(sessions_for(db_url), spec_for(uuid)) is not None
    uuid = make_instance(db_url)
    with statements_run(db_url) as statements:
        assert scheduler.select_and_claim(sessions_for(db_url), spec_for(uuid)) is not None
    [candidates, claim_view] = [s for s in statements if s.startswith("SELECT")]
    by_host = [
        p for p in _plan(db_url, candidates) if p.startswith("SEARCH instances") and "host=?" in p
    ]
    # The count of live instances may read either covering index; the in-flight count,
    # which reads the states, only the new one.
    assert len(by_host) == 2 and all("USING COVERING INDEX" in p for p in by_host), by_host
    assert any("ix_instances_host_deleted_vm_state_task_state" in p for p in by_host), by_host
    usage = [p for p in _plan(db_url, claim_view) if "allocations" in p]
    index = "ix_allocations_compute_node_usage"
    assert usage == [f"SEARCH allocations USING COVERING INDEX {index} (compute_node_id=?)"], usage
