"""What the timeline tests of both tiers share."""

from __future__ import annotations

import time
from typing import Any

from workflows import api


def settled_timeline(server: str, timeout_s: float = 15) -> dict[str, Any]:
    """The timeline once every step has ended: a step's record ends as the step returns,
    just after its last transaction (or its errback) made the server's state visible, so
    a test that waited for a status may read the timeline a moment too early."""
    deadline = time.monotonic() + timeout_s
    while True:
        data = api.timeline(server)
        steps = [s for op in data["operations"] for s in op["steps"]]
        if all(s["ended_at"] for s in steps) or time.monotonic() > deadline:
            return data
        time.sleep(0.1)
