"""Two releases on one node at once, on PostgreSQL: the second waits for the first and
then succeeds on its first try (``claims.release`` locks the node rows it reads),
instead of missing the generation the first bumped and retrying its transaction.
SQLite's writers are one at a time, so only PostgreSQL can show it.

Skipped when no PostgreSQL listens on 127.0.0.1:5432."""

from __future__ import annotations

import threading
import uuid

from compute import claims
from compute.claims import ResourceRequest
from models.db import session_scope
from tests.factories import claim, make_compute_node, node_row


def test_a_release_waits_for_another_on_the_same_node_and_does_not_conflict(
    migrated_pg_url: str,
) -> None:
    pg_db = migrated_pg_url
    node_id = make_compute_node(pg_db, vcpus=8, memory_mb=8192, local_gb=100)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    for consumer in (first, second):
        claim(pg_db, node_id, consumer, ResourceRequest(vcpus=2, memory_mb=1024, disk_gb=10))
    before = node_row(pg_db, node_id)
    outcome: list[object] = []

    def second_release() -> None:
        try:  # one try: a GenerationConflict is the failure this test is about
            with session_scope(pg_db) as session:
                outcome.append(claims.release(session, second))
        except Exception as exc:  # noqa: BLE001 - reported below
            outcome.append(exc)

    with session_scope(pg_db) as session:
        assert claims.release(session, first) == 3  # VCPU, MEMORY_MB, DISK_GB
        racer = threading.Thread(target=second_release)
        racer.start()
        racer.join(timeout=1.0)
        assert racer.is_alive() and not outcome  # waiting for the first's lock
    racer.join(timeout=30)
    assert outcome == [3]
    after = node_row(pg_db, node_id)
    assert after.generation == before.generation + 2
    assert after.vcpus_used == before.vcpus_used - 4
    assert after.memory_mb_used == before.memory_mb_used - 2048
    assert after.running_vms == 0
