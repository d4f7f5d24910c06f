"""ComputeCapabilitiesFilter: the flavor's extra specs must match what the host reports.

An unscoped key (``hypervisor_type``) is checked only when the host has such an attribute
or ``stats`` key, so unrelated unscoped specs do not reject every host. A
``capabilities:``-scoped key walks host attributes, then ``stats``, then nested dicts (or
JSON strings), e.g. ``capabilities:cpu_info:arch``. Keys in any other scope are ignored.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from scheduler.filters import extra_specs_ops
from scheduler.filters.base import BaseFilter
from scheduler.host_state import HostState
from scheduler.request_spec import RequestSpec

LOG = logging.getLogger(__name__)

SCOPE = "capabilities"
MAXPHYSADDR_SPEC = "hw:maxphysaddr_bits"
MAXPHYSADDR_CAPABILITY = "capabilities:cpu_info:maxphysaddr:bits"


class ComputeCapabilitiesFilter(BaseFilter):
    run_filter_once_per_request = True

    def ignores(self, spec: RequestSpec) -> bool:
        return not _extra_specs(spec)

    def host_passes(self, host: HostState, spec: RequestSpec) -> bool:
        for key, req in _extra_specs(spec).items():
            path = _capability_path(host, key)
            if path is None:
                continue
            capability = _lookup(host, path)
            if capability is None:
                LOG.debug("%s: no capability %s for extra spec %s", host.host, path, key)
                return False
            if not extra_specs_ops.match(str(capability), str(req)):
                LOG.debug("%s: extra spec %s=%r does not match %r", host.host, key, req, capability)
                return False
        return True


def _extra_specs(spec: RequestSpec) -> dict[str, Any]:
    specs: dict[str, Any] = dict(spec.flavor.extra_specs)
    # NOTE: Nova rewrites the maxphysaddr spec as a capability requirement.
    bits = specs.pop(MAXPHYSADDR_SPEC, None)
    if bits is not None:
        specs[MAXPHYSADDR_CAPABILITY] = f">= {bits}"
    return specs


def _capability_path(host: HostState, key: str) -> list[str] | None:
    """The attribute path a spec key names, or None when this filter ignores the key."""
    scope = key.split(":")
    if len(scope) == 1:
        return scope if hasattr(host, key) or key in host.stats else None
    return scope[1:] if scope[0] == SCOPE else None


def _lookup(host: HostState, path: list[str]) -> Any:
    capability: Any = host
    for name in path:
        if isinstance(capability, str):
            try:
                capability = json.loads(capability)
            except ValueError:
                return None
        if isinstance(capability, dict):
            capability = capability.get(name)
        elif capability is host:
            found = getattr(host, name, None)
            capability = found if found is not None else host.stats.get(name)
        else:
            return None
        if capability is None:
            return None
    return capability
