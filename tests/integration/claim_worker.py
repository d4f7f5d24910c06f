"""Run in separate processes by test_claim_concurrency: claim as fast as possible."""

from __future__ import annotations

import uuid


def claim_many(db_url: str, node_id: int, attempts: int) -> list[str]:
    from compute.claims import ResourceRequest, claim, retry_on_conflict
    from compute.sessions import sessions_for
    from novaq.exceptions import ResourcesUnavailable

    sessions = sessions_for(db_url)
    request = ResourceRequest(vcpus=1, memory_mb=256, disk_gb=1)

    won = []
    for _ in range(attempts):
        consumer = str(uuid.uuid4())
        try:
            retry_on_conflict(sessions, lambda s, c=consumer: claim(s, node_id, c, request))  # type: ignore[misc]
            won.append(consumer)
        except ResourcesUnavailable:
            pass
    return won
