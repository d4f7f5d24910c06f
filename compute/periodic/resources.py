"""``update_available_resource`` as a periodic pass (the audit itself is
``compute.resource_tracker``)."""

from __future__ import annotations

from typing import Any

from compute import resource_tracker
from compute.periodic import PeriodicContext


def update_available_resource(ctx: PeriodicContext) -> dict[str, Any]:
    heals = resource_tracker.update_available_resource(
        ctx.sessions, ctx.hypervisor, ctx.host, ctx.settings
    )
    return {"heals": len(heals), "actions": sorted({h["action"] for h in heals})}
