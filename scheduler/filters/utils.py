"""Small helpers shared by several filters (Nova's ``scheduler/filters/utils.py``)."""

from __future__ import annotations

import logging
from typing import Any

from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)


def aggregate_values(host: HostState) -> dict[str, set[str]]:
    """Aggregate metadata of ``host`` with every value split on commas, as Nova reads it:
    an aggregate with ``ssd=true, fast`` offers both ``true`` and ``fast``."""
    return {
        key: {part.strip() for value in values for part in value.split(",")}
        for key, values in host.aggregate_metadata().items()
    }


def aggregate_values_from_key(host: HostState, key: str) -> set[str]:
    """The values of metadata ``key`` in ``host``'s aggregates, whole (Nova's function of
    the same name: no splitting on commas)."""
    return {a.metadata[key] for a in host.aggregates if key in a.metadata}


def aggregate_min_int(host: HostState, key: str, default: int) -> int:
    """The smallest of ``host``'s aggregates' integer values of ``key``, or ``default``
    when no aggregate sets it or any value is not an integer (Nova's
    ``validate_num_values``, and its fallback with a warning)."""
    values = aggregate_values_from_key(host, key)
    if not values:
        return default
    try:
        return min(int(value) for value in values)
    except ValueError:
        LOG.warning("Could not decode %s: %s; using %d", key, sorted(values), default)
        return default


def hint_value(spec: RequestSpec, name: str, default: Any = None) -> Any:
    """A scheduler hint as Nova's ``RequestSpec.get_scheduler_hint`` gives it: ``default``
    when the request has no such hint, a list of one value as that value (hints are
    stored as lists of strings, as Nova stores them), any other value as it is."""
    hint: Any = spec.hints.get(name, default)
    if isinstance(hint, list) and len(hint) == 1:
        return hint[0]
    return hint


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
