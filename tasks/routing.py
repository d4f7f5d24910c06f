"""Route every step, not the chain: a compute step goes to ``compute.<host>`` from its own
``host`` keyword, whatever chain it travels in (see CELERY_RELIABILITY.md §2.6)."""

from __future__ import annotations

from typing import Any


def route_task(
    name: str, args: Any, kwargs: dict[str, Any] | None, options: dict[str, Any], **_: Any
) -> dict[str, str] | None:
    if name.startswith("compute."):
        host = (kwargs or {}).get("host")
        if not host:
            raise ValueError(f"task {name} has no host to route to")
        return {"queue": f"compute.{host}"}
    if name.startswith("scheduler."):
        return {"queue": "scheduler"}
    if name.startswith("periodic."):
        return {"queue": "maintenance"}
    return None
