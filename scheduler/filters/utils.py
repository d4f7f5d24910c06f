"""Small helpers shared by several filters (Nova's ``scheduler/filters/utils.py``)."""

from __future__ import annotations

from typing import Any

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec


def aggregate_values(host: HostState) -> dict[str, set[str]]:
    """Aggregate metadata of ``host`` with every value split on commas, as Nova reads it:
    an aggregate with ``ssd=true, fast`` offers both ``true`` and ``fast``."""
    return {
        key: {part.strip() for value in values for part in value.split(",")}
        for key, values in host.aggregate_metadata().items()
    }


def hint_values(spec: RequestSpec, name: str) -> set[str]:
    """A scheduler hint given either as one string or as a list of strings.

    Read as Nova's ``RequestSpec.get_scheduler_hint`` reads it: a list of one value is
    that value, so ``[""]`` (what a client sends for an empty hint) is no hint at all,
    and the filters that take the hint pass every host, as Nova's do.
    """
    hint: Any = spec.hints.get(name)
    if isinstance(hint, list) and len(hint) == 1:
        hint = hint[0]
    if not hint:
        return set()
    if isinstance(hint, str):
        return {hint}
    return {str(item) for item in hint}


def instance_uuids_overlap(host: HostState, uuids: set[str]) -> bool:
    """Whether any of ``uuids`` is an instance on ``host``."""
    return not host.instances.isdisjoint(uuids)
