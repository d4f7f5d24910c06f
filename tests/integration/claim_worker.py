"""Run in separate processes by test_claim_concurrency: claim as fast as possible."""

from __future__ import annotations

import uuid


def claim_many(db_url: str, node_id: int, attempts: int) -> list[str]:
    from compute.claims import ResourceRequest, claim
    from novaq.exceptions import ResourcesUnavailable

    won = []
    for _ in range(attempts):
        consumer = str(uuid.uuid4())
        try:
            claim(db_url, node_id, consumer, ResourceRequest(vcpus=1, memory_mb=256, disk_gb=1))
            won.append(consumer)
        except ResourcesUnavailable:
            pass
    return won
